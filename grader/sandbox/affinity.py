"""One CPU for a grading: its judge, its sandbox's template and the workers forked from it.

The judge and its worker take turns: one waits for the other's reply, thousands of times a grade. Left
free, the scheduler wakes the one replied to on an idle CPU, so every round trip crosses CPUs and wakes
an idle one; on one CPU each hand-over is a switch on that CPU. Measured on the 2-core (virtual)
development machine, CPU of the command and its workers: `grader grade solutions` 11.3 to 11.9 s free,
8.1 to 8.3 s on one CPU; `grader check solutions` 5.6 to 6.0 s against 4.6 s
(docs/performance-history.md, sixth pass).

Gradings side by side (grade-all's `--jobs`, the tests' processes) each claim a CPU of their own: an
abstract Unix socket per CPU (CLAIM), bound while the grading runs and gone with its process, which leaves
no file anywhere. Where every allowed CPU is claimed, or where a process cannot pin itself (macOS,
Windows), the grading runs unpinned, as before; so too where a worker without a network namespace of its
own ("setuid", "plain") has bound a free CPU's name. Time limits count CPU time and leave out the time a
worker waited for a CPU (docs/grading.md, "Time limits"): no verdict depends on where it runs.
"""
import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

CLAIM = "grader-cpu-{uid}-{cpu}"
"""The abstract socket name (Linux's abstract namespace: no file, per network namespace) that claims a CPU
for one grading of this user's."""


def _current_cpu() -> int | None:
    """The CPU this thread runs on (Linux's /proc), None where it cannot tell."""
    try:
        line = Path("/proc/thread-self/stat").read_text()
        return int(line.rpartition(")")[2].split()[36])  # field 39, "processor"
    except (OSError, ValueError, IndexError):
        return None


def _claimed(cpu: int) -> socket.socket | None:
    """A socket bound to CPU `cpu`'s claim, None if another grading holds it (or no socket can be made:
    a container that refuses them)."""
    try:
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        claim.bind("\0" + CLAIM.format(uid=os.getuid(), cpu=cpu))
    except OSError:
        claim.close()
        return None
    return claim


def _claim() -> tuple[int, socket.socket] | None:
    """(CPU, its claim): the first allowed CPU from the one this thread runs on that no other grading
    holds; None where there is none, or where this process cannot pin itself."""
    if not (sys.platform.startswith("linux") and hasattr(os, "sched_getaffinity")
            and hasattr(os, "sched_setaffinity")):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    current = _current_cpu()
    if len(allowed) < 2 or current not in allowed:
        return None
    start = allowed.index(current)
    for cpu in allowed[start:] + allowed[:start]:
        claim = _claimed(cpu)
        if claim is not None:
            return cpu, claim
    return None


@contextlib.contextmanager
def one_cpu() -> Iterator[int | None]:
    """Pin this thread (and what it forks or starts from now on) to one allowed CPU that no other
    grading of this user's holds, starting with the one it runs on; its former CPUs come back after.
    Yields the CPU, or None where it stays unpinned."""
    claimed = _claim()
    if claimed is None:
        yield None
        return
    cpu, claim = claimed
    allowed = os.sched_getaffinity(0)
    try:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:  # a seccomp filter, a cpuset changed meanwhile: unpinned
            yield None
            return
        try:
            yield cpu
        finally:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, allowed)
    finally:
        claim.close()
