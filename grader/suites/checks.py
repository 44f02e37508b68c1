"""What a test asserts, phrased for the student: expect(), expect_close() and their messages."""
from collections.abc import Callable, Mapping

import torch

from ..sandbox.client import StudentError

Diagnoses = Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]]
"""Mistake sentence -> what a submission with that mistake returns (or a function building that)."""


class Failed(AssertionError):
    """A property the submission did not have; the message is shown to the student."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def shape_of(value: object) -> str:
    """A tensor's shape, "missing" for None, else the type's name: for messages."""
    if value is None:
        return "missing"
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def expect_tensor(actual: object, shape: tuple, what: str) -> torch.Tensor:
    """actual must be a tensor of this shape."""
    expect(isinstance(actual, torch.Tensor), f"{what} should be a tensor, got {type(actual).__name__}")
    expect(tuple(actual.shape) == tuple(shape),
           f"{what} has shape {tuple(actual.shape)}, expected {tuple(shape)}")
    return actual


def _close(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    return actual.shape == expected.shape and torch.allclose(
        actual.to(torch.float64), expected.to(torch.float64), atol=atol, rtol=rtol, equal_nan=False)


def expect_close(actual: object, expected: torch.Tensor, what: str, *, atol: float = 1e-6,
                 rtol: float = 1e-5, hint: str = "",
                 diagnoses: Diagnoses | None = None) -> None:
    """actual ≈ expected; else say by how much, and which classic mistake it matches, if any.

    diagnoses maps a sentence ("the scores are not divided by sqrt(d_k)") to what a submission
    with that mistake returns; a match is named in the message instead of the generic hint.
    Pass a function returning that mapping to build the variants only when the check fails.
    """
    actual = expect_tensor(actual, expected.shape, what)
    if not torch.isfinite(actual).all() and torch.isfinite(expected).all():
        bad = (~torch.isfinite(actual)).nonzero()[0].tolist()
        raise Failed(f"{what} contains NaN or inf (first at index {tuple(bad)}), expected finite values"
                     + (f" — {hint}" if hint else ""))
    if _close(actual, expected, atol, rtol):
        return
    diff = (actual.to(torch.float64) - expected.to(torch.float64)).abs()
    worst = tuple(diff.argmax().item() // s % n for s, n in _strides(diff.shape))
    message = f"{what} differs from the expected value by {diff.max().item():.3g} (max abs, at index {worst})"
    if callable(diagnoses):
        diagnoses = diagnoses()
    for sentence, variant in (diagnoses or {}).items():
        if variant.shape == actual.shape and _close(actual, variant, atol * 10, rtol * 10):
            raise Failed(f"{message}: it matches what you get when {sentence}")
    raise Failed(message + (f" — {hint}" if hint else ""))


def _strides(shape: torch.Size) -> list[tuple[int, int]]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append((step, n))
        step *= n
    return list(reversed(strides))


def expect_same_keys(actual: Mapping, expected: Mapping, what: str) -> None:
    missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
    expect(not missing and not extra,
           f"{what} keys differ from docs/spec.md: missing {missing or 'none'}, unexpected {extra or 'none'}")


def expect_value_error(call: Callable[[], object], what: str, names: tuple[str, ...]) -> None:
    """call() must raise ValueError whose message names one of `names` (the bad argument).

    The student's NotImplementedError goes through untouched, so a stub reads "not attempted".
    """
    try:
        call()
    except StudentError as error:
        if error.type_name == "NotImplementedError":
            raise
        expect(error.type_name == "ValueError", f"{what} raised {error}, expected ValueError")
        expect(any(name in error.message for name in names),
               f"{what} raised ValueError({error.message!r}): the message should name the argument "
               f"({' or '.join(names)})")
        return
    raise Failed(f"{what} should raise ValueError")
