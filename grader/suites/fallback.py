"""The dtype a component judged on what it adds is checked in.

The block runs the student's own attention and feed-forward network, the model its own blocks,
attention_maps its own model. Where such a dependency cannot compute in the dtype a test wants
(it raises, or returns another dtype: float32 for float64 inputs, say), the test runs in float32
instead, at float32's tolerance: the dtype rule ("compute in the input's dtype") costs points in
the dependency's own tests only, and this component is still judged on everything it adds.

Whether a test may fall back is decided by what the judge saw, never by the student's code alone: only
where one of the dependency's own float64 tests (Case.float64) did not pass earlier in this grading.
A probe of the dependency (runnable_dtype) then says whether, and to what; but a dependency that passed
every float64 test of its own is checked in float64 in every test that uses it, however it behaves when
the judge calls it from a dependent's test (an attn that refuses float64 only there cannot buy its block
float32's tolerance). A dependency whose tests are not part of the grading (`--only block`) leaves the
probe to decide, as does a check run outside a grading (Seen is the judge's)."""
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from ..results import Failed, Result
from ..sandbox.errors import StudentError
from ..scoring import runs
from ..spec import Status

FALLBACK = torch.float32
"""What a test runs in when the student's own dependency cannot run in the dtype it wants."""

PROBED = frozenset({"attention", "feedforward", "block", "model"})
"""The components whose modules a dependent's probe runs (the block's sublayers, the model's blocks,
attention_maps's model). Their tests that run them in float64 say so (`@suite.case(..., float64=True)`):
the only witnesses of "cannot run in float64" that open the fallback for their dependents; each has public
ones, so that the public phase decides from its own tests too. (positional is not probed: the probes run
its apply_rope through attention only, whose own tests fail where it cannot run in float64.)"""


@dataclass
class Seen:
    """What a grading's tests saw so far, for the fallback: the judge's (judge.judge), one per grading.

    `graded` are the components graded; `component` the one whose test runs now; `failed` the components
    one of whose float64 tests did not pass (for whatever reason: a float32 failure too opens the
    fallback, and the probe decides). The judge runs every component's tests after those of the
    components it builds on (COMPONENTS order, public tests first), so their verdicts are in."""

    graded: frozenset[str]
    component: str = ""
    failed: set[str] = field(default_factory=set)

    def saw(self, result: Result, *, float64: bool) -> None:
        """Record one test's result; `float64`: its case runs its component in float64 (Case.float64)."""
        if float64 and result.status is not Status.PASSED:
            self.failed.add(result.component)

    def may_fall_back(self) -> bool:
        """Whether a dependency of the component now tested is not known to run in float64: one of its
        float64 tests failed in this grading, or it is not graded."""
        return any(name not in self.graded or name in self.failed
                   for name in runs(self.component) if name in PROBED)


_SEEN: ContextVar[Seen | None] = ContextVar("fallback_seen", default=None)


@contextmanager
def observing(components: tuple[str, ...]) -> Iterator[Seen]:
    """What the judge records this grading's results in (Seen.saw), read by every fallback meanwhile."""
    token = _SEEN.set(seen := Seen(frozenset(components)))
    try:
        yield seen
    finally:
        _SEEN.reset(token)


def may_fall_back() -> bool:
    """Seen.may_fall_back of this grading; outside a grading (a check run on its own), True."""
    seen = _SEEN.get()
    return seen is None or seen.may_fall_back()


def _floats(value: object) -> list[torch.Tensor]:
    """The floating-point tensors in a (nested) result."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _floats(item)]
    return []


def runs_in(run: Callable[[torch.dtype], object], dtype: torch.dtype) -> bool:
    """run(dtype) (the student's dependency on `dtype` inputs) returns without an error, every
    floating-point tensor in `dtype`. A stub or a function known to hang ends the case as it would
    anyway (the judge's CaseOver is no Exception)."""
    try:
        result = run(dtype)
    except (StudentError, Failed):
        return False
    floats = _floats(result)
    return bool(floats) and all(t.dtype == dtype for t in floats)


def checked_in(dtype: torch.dtype, wanted: torch.dtype, dependency: str) -> str:
    """A clause for messages: "" where a test runs in the dtype it wants, else where and why not."""
    return "" if dtype == wanted else f", checked in {dtype}: your {dependency} cannot run in {wanted}"


def in_runnable_dtype(check: Callable[[torch.dtype], object], run: Callable[[torch.dtype], object],
                      dtype: torch.dtype) -> None:
    """check(runnable_dtype(run, dtype)), probing only where check(dtype) fails: nearly every submission's
    dependency runs in the dtype a test wants, and the probe (a throwaway model or block, run once) is
    then spared. Where check(dtype) fails and the dependency cannot run in `dtype` but can in FALLBACK,
    check(FALLBACK) decides, as it would have; otherwise check(dtype)'s failure stands, as it would have.
    (A check that passes in `dtype` where the probe would have chosen FALLBACK passes: the dependency then
    returns another dtype and the check holds anyway.)"""
    try:
        check(dtype)
    except (StudentError, Failed):
        fallback = runnable_dtype(run, dtype)
        if fallback == dtype:
            raise
        check(fallback)


def runnable_dtype(run: Callable[[torch.dtype], object], dtype: torch.dtype) -> torch.dtype:
    """`dtype`, unless the student's dependency (run(dtype) runs it on `dtype` inputs) cannot run in it
    and can in FALLBACK: then FALLBACK. A dependency that runs in neither leaves `dtype`: the test then
    fails as that dependency does. So does one that passed its own float64 tests in this grading
    (may_fall_back), unprobed: how it behaves when called here is not the judge's evidence."""
    if dtype == FALLBACK or not may_fall_back() or runs_in(run, dtype) or not runs_in(run, FALLBACK):
        return dtype
    return FALLBACK
