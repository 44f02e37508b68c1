"""The dtype a component judged on what it adds is checked in.

The block runs the student's own attention and feed-forward network, the model its own blocks,
attention_maps its own model. Where such a dependency cannot compute in the dtype a test wants
(it raises, or returns another dtype: float32 for float64 inputs, say), the test runs in float32
instead, at float32's tolerance: the dtype rule ("compute in the input's dtype") costs points in
the dependency's own tests only, and this component is still judged on everything it adds."""
from collections.abc import Callable

import torch

from ..results import Failed
from ..sandbox.client import StudentError
from ..student import settled

FALLBACK = torch.float32
"""What a test runs in when the student's own dependency cannot run in the dtype it wants."""


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
        result = settled(run)(dtype)
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
        settled(check)(dtype)
    except (StudentError, Failed):
        fallback = runnable_dtype(run, dtype)
        if fallback == dtype:
            raise
        check(fallback)


def runnable_dtype(run: Callable[[torch.dtype], object], dtype: torch.dtype) -> torch.dtype:
    """`dtype`, unless the student's dependency (run(dtype) runs it on `dtype` inputs) cannot run in it
    and can in FALLBACK: then FALLBACK. A dependency that runs in neither leaves `dtype`: the test then
    fails as that dependency does."""
    if dtype == FALLBACK or runs_in(run, dtype) or not runs_in(run, FALLBACK):
        return dtype
    return FALLBACK
