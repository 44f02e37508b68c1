"""The grader's vocabulary, defined once: components, the contract's option values, defaults,
visibility, test statuses and the tolerances comparisons use (docs/spec.md says why each)."""
import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple

from .points import COMPONENT_POINTS as POINTS

COMPONENTS = ("attention", "positional", "feedforward", "block", "model", "trainer", "analysis", "quiz")
DEPENDS = {
    "attention": ("positional",),
    "block": ("attention", "feedforward"),
    "model": ("attention", "block", "positional", "trainer"),
    "analysis": ("model",),
}
"""What each component's tests also run of the student's code (for the 'fix X first' notes)."""
COMPONENT_POINTS = POINTS
"""Each component's points: the sum of its tests' `@suite.case(points)` values, which `grader generate`
writes to grader/points.py (the student release has no hidden suites to sum)."""
FIXED_TOTAL: float | None = None
"""A component's points are the sum of its tests' (grader/points.py, generated); the total is what they sum
to. A course that wants a fixed total sets it here: `grader generate` then refuses any other, naming the
components whose points moved."""

POS_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")
NORMS = ("pre", "post")
ACTIVATIONS = ("gelu", "relu")
IGNORE_INDEX = -100
"""Targets equal to this are not scored (docs/spec.md, trainer.py)."""

MODEL_DEFAULTS = {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 256, "max_len": 128, "dropout": 0.0,
                  "norm": "pre", "pos_encoding": "sinusoidal", "activation": "gelu"}
"""TinyTransformerLM's defaults (docs/spec.md (M1)); tests/autograder/judge/test_spec_facts.py checks them
against the reference's signature."""


UNSAFE_FLAG = "--unsafe-no-sandbox"
"""The option of `grader grade`, grade-all and autograder that grades where no sandbox runs ("plain" mode)."""


class Visibility(StrEnum):
    """Who runs a test: `grader check` runs the public ones, `grader grade` both."""

    PUBLIC = "public"
    HIDDEN = "hidden"


class Status(StrEnum):
    """How one test ended; only PASSED scores."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_ATTEMPTED = "not_attempted"
    TIMED_OUT = "timed_out"  # it used up its CPU time, or slept: a fact about the code
    STALLED = "stalled"  # the wall-clock backstop stopped it while starved of CPU: not a verdict, grade again
    CRASHED = "crashed"
    ERROR = "error"


NOT_RUN = "not run (time limit)"
"""How a test the grading had no time left for begins its message (judge's `deadline`)."""
IMPORTED_BY = "{problem} ({module}.py imports it)"
"""The message of the tests of a component whose file imports one that cannot be imported: the file at
fault's problem first, so that grade-all's summary counts it once a student (gradebook.root_cause)."""


class Tolerance(NamedTuple):
    atol: float
    rtol: float


class _ByDtype(dict):
    """Keyed by dtype name, looked up by a torch dtype (so this module needs no torch)."""

    def __getitem__(self, dtype: Any) -> Tolerance:
        return super().__getitem__(str(dtype).removeprefix("torch."))


TOLERANCES = _ByDtype(
    float32=Tolerance(atol=1e-5, rtol=1e-4),  # float32 rounding through a few matmuls and a softmax
    float64=Tolerance(atol=1e-6, rtol=1e-5),  # any correct order of operations lands far inside this
)
"""Values compared with the reference, by the dtype the test computes in: TOLERANCES[torch.float32]."""
GRADIENT_TOLERANCE = Tolerance(atol=1e-8, rtol=1e-6)
"""Gradients, always compared in float64."""
FLOAT32_TABLE_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-5)
"""Where a float32 table enters a float64 computation (the sinusoidal table P1 is float32 by contract)."""
EXACT = Tolerance(atol=1e-12, rtol=1e-12)
"""Two runs of the student's own code that must agree (dropout off in eval mode)."""


@dataclass(frozen=True)
class Budgets:
    """A grading's time limits in seconds, stated once (at --timeout-scale 1); the limits that
    guard them are derived here, so that they stay above what they guard."""

    submission: float = 300.0
    """All of one submission's cases, shared among its components (judge.component_budgets)."""
    case: float = 8.0
    """One case's limit, unless the case sets its own (Suite.case)."""
    file_import: float = 10.0
    """Importing one submission file: milliseconds for any sensible one (torch is imported already)."""
    worker_start: float = 60.0
    """A worker's start-up (Python, torch and numpy imported); not scaled: it is not the student's code."""
    call: float = 600.0
    """A call outside any case's limit (none does in a grading: a test's own tools, a notebook's)."""
    reset: float = 5.0
    """The worker forgetting a case's objects after it (their __del__ runs then)."""
    grace: float = 0.5
    """A worker out of time gets this long to say where its code was, before it is killed (SIGXCPU on POSIX;
    on Windows its own watchdog, the request carrying its CPU seconds)."""
    wall_factor: float = 5.0
    """Each limit above counts the worker's CPU seconds; its wall-clock backstop is this many times
    longer and counts the time waited for the worker while it was not waiting for a CPU (sandbox/clocks.py):
    only a worker that sleeps or waits reaches it (or, where the kernel does not say how long it waited
    for a CPU, one that gets less than 1/wall_factor of a core)."""

    def scaled(self, factor: float) -> "Budgets":
        """The limits of the student's code multiplied by `factor` (--timeout-scale)."""
        return replace(self, submission=self.submission * factor, case=self.case * factor,
                       file_import=self.file_import * factor)

    @property
    def most_used(self) -> float:
        """The most a grading can take by these budgets: its cases, an import per file and a worker
        start-up per file (a file that hangs costs a worker)."""
        return self.submission + len(COMPONENTS) * (self.file_import + self.worker_start)

    @property
    def worker_cpu_seconds(self) -> int:
        """A worker's CPU-time rlimit: above anything one worker may be given to run, so that only
        a worker that escaped the judge's clock meets it."""
        return math.ceil(2 * self.most_used)

    @property
    def backstop(self) -> float:
        """grade-all stops a grading still running after this: only a grader that hangs meets it (its
        workers may be waited for wall_factor times their CPU budgets)."""
        return 2 * self.wall_factor * self.most_used


BUDGETS = Budgets()
