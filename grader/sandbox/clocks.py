"""The sandbox's two clocks, and how a call runs out of time on them.

Time limits count the CPU seconds a worker uses (Sandbox.cpu_seconds), not the wall clock: a loaded
machine slows a worker down but does not make it use more CPU. A wall-clock backstop,
spec.Budgets.wall_factor times longer, stops a worker that sleeps or waits instead of computing: it
counts the time spent waiting for the worker's reply, less the time the worker itself waited for a CPU
(the kernel's run-queue delay, /proc/PID/task/TID/schedstat), so load does not bring it nearer either.
"""
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

SEES_STARVATION = Path("/proc/self/schedstat").is_file()
"""Whether the kernel says how long a process waited for a CPU: then the backstop's clock leaves that
out, and reaching it is a fact about the code (it slept), not about the machine."""
POLL_SECONDS = 0.25
"""How often the judge reads a busy worker's clocks while it waits for its reply."""


class Timeout(Enum):
    """How a call ran out of time, and what the judge says of it."""

    CPU = "used up its CPU time (an infinite loop, or far too slow?)"
    ASLEEP = "slept or waited past the wall-clock backstop without computing"
    STALLED = "did not answer within the wall-clock backstop (a machine too loaded?)"


CPU, ASLEEP, STALLED = Timeout.CPU, Timeout.ASLEEP, Timeout.STALLED


class OutOfTime(Exception):
    """A call's allowance ran out (`timeout` says how): in the worker's reply's wait, or between calls
    (hypothesis still drawing or shrinking, judge.GuardedStudent)."""

    def __init__(self, timeout: Timeout):
        super().__init__(timeout.name.lower())
        self.timeout = timeout


@dataclass(frozen=True)
class Allowance:
    """Until when calls may run, on the sandbox's two clocks: `cpu` on Sandbox.cpu_seconds() (the
    limit), `waited` on Sandbox.waited (the wall-clock backstop)."""

    cpu: float
    waited: float
    seconds: float
    """The limit, in CPU seconds (for messages)."""
