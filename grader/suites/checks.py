"""What a test asserts, phrased for the student: expect(), expect_close() and their messages.

A message says only what happened: NaN is reported as NaN (never as a wrong sign or sum), a
mistake is named only when the submission's value matches it, and a float64 comparison that
misses by float32 rounding says so instead of suggesting a wrong formula."""
import functools
import inspect
import math
from collections.abc import Callable, Mapping

import torch

from ..results import Failed
from ..sandbox.errors import StudentError
from ..spec import GRADIENT_TOLERANCE, Tolerance
from ..student import Remote

Diagnoses = Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]]
"""Mistake sentence -> what a submission with that mistake returns (or a function building that)."""

MATCH_FACTOR = 10
"""A diagnosis is named when the value is within this times the comparison's tolerance of it, at
most half as far from it as from the expected value, and the diagnosis itself differs from the
expected value (a mistake that does not change the value here explains nothing). Of several, the
nearest is named, with any other that is about as near."""
FLOAT32_ROUNDING = 1e-5
"""Largest difference, relative to the expected value's largest entry, that float32 rounding
explains: float32 keeps 7 digits and the tests' computations lose one or two (measured: 6e-8 to
3e-7); classic mistakes move values by 1e-3 or more, a few (GELU's tanh approximation) by 4e-5."""
GRAPH_CUT = ".detach(), .item(), numpy or .data"


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def kind_of(value: object) -> str:
    """What a value is, for messages: the type's name, or what the student's object is."""
    return value.kind if isinstance(value, Remote) else type(value).__name__


def shape_of(value: object) -> str:
    """A tensor's shape, "missing" for None, else what it is: for messages."""
    if value is None:
        return "missing"
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else kind_of(value)


def expect_number(value: object, what: str) -> float:
    """value is a finite real number (or a one-element tensor of one), as a float."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()
    expect(isinstance(value, (int, float)) and not isinstance(value, bool),
           f"{what} should be a float, got {kind_of(value)}")
    expect(math.isfinite(value), f"{what} is {value}, expected a finite number")
    return float(value)


def expect_finite(value: torch.Tensor, what: str, hint: str = "") -> None:
    """Every entry of value is finite; else name the first NaN or inf and how many there are.

    Use it before checks of signs, sums or order, which NaN fails with a misleading message."""
    bad = ~torch.isfinite(value)
    if bad.any():
        index = tuple(bad.nonzero()[0].tolist())
        raise Failed(f"{what} is {value[index].item()} at index {index} ({int(bad.sum())} of {value.numel()} "
                     "entries are NaN or inf), expected finite values" + (f" — {hint}" if hint else ""))


def expect_tensor(actual: object, shape: tuple, what: str, *, finite: bool = False) -> torch.Tensor:
    """actual must be a tensor of this shape (and, with finite, hold no NaN or inf)."""
    expect(isinstance(actual, torch.Tensor), f"{what} should be a tensor, got {kind_of(actual)}")
    expect(tuple(actual.shape) == tuple(shape),
           f"{what} has shape {tuple(actual.shape)}, expected {tuple(shape)}")
    if finite and actual.is_floating_point():
        expect_finite(actual, what)
    return actual


def close(actual: object, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    """actual is a tensor of expected's shape, allclose to it in float64 (NaN is never close)."""
    return isinstance(actual, torch.Tensor) and actual.shape == expected.shape and torch.allclose(
        actual.to(torch.float64), expected.to(torch.float64), atol=atol, rtol=rtol, equal_nan=False)


def _difference(actual: torch.Tensor, expected: torch.Tensor, what: str) -> tuple[str, float]:
    """'what differs from the expected value by D (max abs, at index I)' and D relative to the
    expected value's largest entry (inf where that is 0)."""
    diff = (actual.to(torch.float64) - expected.to(torch.float64)).abs()
    worst = tuple(diff.argmax().item() // s % n for s, n in _strides(diff.shape))
    scale = expected.to(torch.float64).abs().max().item() if expected.numel() else 0.0
    largest = diff.max().item()
    relative = largest / scale if scale > 0 else float("inf")
    return f"{what} differs from the expected value by {largest:.3g} (max abs, at index {worst})", relative


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.to(torch.float64) - b.to(torch.float64)).abs().max().item()


def _named(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float,
           diagnoses: Diagnoses | None) -> str | None:
    """The diagnoses that explain actual (see MATCH_FACTOR), as one clause; None if none does."""
    if callable(diagnoses):
        diagnoses = diagnoses()
    miss = _distance(actual, expected)
    matches = sorted((_distance(actual, variant), sentence) for sentence, variant in (diagnoses or {}).items()
                     if close(actual, variant, atol * MATCH_FACTOR, rtol * MATCH_FACTOR)
                     and not close(variant, expected, atol, rtol))
    matches = [(d, sentence) for d, sentence in matches if 2 * d <= miss]
    if not matches:
        return None
    nearest = matches[0][0]
    return ", or when ".join(sentence for d, sentence in matches if d <= 2 * nearest + atol)


def _explained(actual: torch.Tensor, expected: torch.Tensor, what: str, atol: float, rtol: float,
               diagnoses: Diagnoses | None, float64: bool) -> str | None:
    """The failure message when a diagnosis (or, for a float64 comparison, float32 rounding)
    explains the miss; None when nothing does."""
    message, relative = _difference(actual, expected, what)
    named = _named(actual, expected, atol, rtol, diagnoses)
    if named is not None:
        return f"{message}: it matches what you get when {named}"
    if float64 and relative <= FLOAT32_ROUNDING:
        return (f"{message}, {relative:.1g} of its largest entry: the size of float32 rounding. Is part of "
                "the computation done in float32 (a .float(), a float32 table, or a tensor created without "
                "dtype= such as torch.arange(...) / d or torch.tensor(...))? With float64 inputs, compute in "
                "float64")
    return None


def _unexplained(actual: torch.Tensor, expected: torch.Tensor, what: str, hint: str) -> str:
    return _difference(actual, expected, what)[0] + (f" — {hint}" if hint else "")


def expect_close(actual: object, expected: torch.Tensor, what: str, *, atol: float = 1e-6,
                 rtol: float = 1e-5, hint: str = "", diagnoses: Diagnoses | None = None,
                 float64: bool = False) -> None:
    """actual ≈ expected; else say by how much, and which classic mistake it matches, if any.

    diagnoses maps a sentence ("the scores are not divided by sqrt(d_k)") to what a submission
    with that mistake returns; a match is named in the message instead of the generic hint (a
    mistake whose value is the expected one here is never named). Pass a function returning
    that mapping to build the variants only when the check fails. float64: the comparison is
    meant to be float64 throughout, so a miss of float32 rounding's size is named as such.
    """
    actual = expect_tensor(actual, expected.shape, what)
    if torch.isfinite(expected).all():
        expect_finite(actual, what, hint)
    if not close(actual, expected, atol, rtol):
        raise Failed(_explained(actual, expected, what, atol, rtol, diagnoses, float64)
                     or _unexplained(actual, expected, what, hint))


Moves = Callable[[torch.Tensor], bool]
"""Whether the student's output changes when the entries of an input marked True move: it tells a
cut graph (it does change) from a formula that ignores them (it does not)."""


def _no_gradient(moves: Moves | None, entries: torch.Tensor) -> str:
    """Why no gradient reaches these entries, said only as far as `moves` confirms it."""
    if moves is None:
        return ""
    if moves(entries):
        return f": your output changes when they move, so the graph is cut there ({GRAPH_CUT})"
    return (": your output does not change when they move either, so the forward formula itself ignores "
            "them (the value tests say how)")


def expect_grad_close(actual: object, expected: torch.Tensor, what: str, *,
                      tolerance: Tolerance = GRADIENT_TOLERANCE, hint: str = "",
                      diagnoses: Diagnoses | None = None, moves: Moves | None = None,
                      float64: bool = True) -> None:
    """A float64 gradient ≈ expected (as expect_close with float64=True); a miss that no diagnosis
    explains says which of three things happened: no gradient (None, or 0 where the expected one
    is not), a float32-rounding-sized difference (float64 only), or another difference (the hint).
    For no gradient, `moves` (when given) says whether the output depends on those entries: a cut
    graph is named only when it does."""
    if actual is None:
        raise Failed(f"{what} is missing: no gradient reaches it"
                     + _no_gradient(moves, torch.ones(expected.shape, dtype=torch.bool)))
    actual = expect_tensor(actual, expected.shape, what)
    expect_finite(actual, what)
    atol, rtol = tolerance
    if close(actual, expected, atol, rtol):
        return
    explained = _explained(actual, expected, what, atol, rtol, diagnoses, float64)
    if explained is not None:
        raise Failed(explained)
    cut = (actual == 0) & ((actual.to(torch.float64) - expected).abs() > atol + rtol * expected.abs())
    if cut.any():
        index = tuple(cut.nonzero()[0].tolist())
        said = _no_gradient(moves, cut)
        raise Failed(f"{what} is 0 at index {index} where {expected[index].item():.3g} is expected "
                     f"({int(cut.sum())} of {actual.numel()} entries): no gradient reaches them"
                     + (said or (f" — {hint}" if hint else "")))
    raise Failed(_unexplained(actual, expected, what, hint))


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


# ---------------------------------------------------------------------------- dropout
DROPOUT_FIT = 0.99
"""Share of the informative entries a reading of train-mode output must explain to be named."""
DROPOUT_OFF_IN_EVAL = ("dropout must be off in eval mode: use nn.Dropout, or F.dropout(..., "
                       "training=self.training) (F.dropout drops by default)")
DROPOUT_RATE_SLACK = 0.06
"""How far the share of dropped entries may be from p: callers measure 1000 or more informative
entries, so a correct nn.Dropout(p) is within 0.016 (one sd at p = 0.5) and this is 4 sd."""


def _dropout_share(actual: torch.Tensor, informative: torch.Tensor, kept: torch.Tensor,
                   dropped: torch.Tensor) -> float:
    """The share of informative entries of actual equal to `kept` or to `dropped` there."""
    hit = (((actual - kept).abs() <= 1e-6 * (1 + kept.abs()))
           | ((actual - dropped).abs() <= 1e-6 * (1 + dropped.abs())))
    return hit[informative].double().mean().item()


def expect_dropout(actual: torch.Tensor, kept: torch.Tensor, p: float, what: str, where: str,
                   alternatives: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
    """`actual` (the student's train-mode value) is `kept` (its eval-mode value) after nn.Dropout(p):
    each entry 0 or kept / (1 - p), about a share p of them 0 (entries where kept is about 0 say
    nothing and are left out). Else say which reading explains it: nothing dropped, survivors not
    rescaled or scaled for another rate, one of `alternatives` ({sentence: (what a kept entry and a
    dropped entry are when that mistake is made)}, e.g. dropout applied after a bias is added), a
    wrong rate. `where` says where the contract applies this dropout (for the messages)."""
    expect_finite(actual, f"{what} in train mode with dropout={p}")
    actual, kept = actual.to(torch.float64), kept.to(torch.float64)
    informative = kept.abs() > 1e-3
    zero = torch.zeros_like(kept)
    train = f"in train mode with dropout={p}, {what}"
    if _dropout_share(actual, informative, kept / (1 - p), zero) < DROPOUT_FIT:
        if _dropout_share(actual, informative, kept, kept) >= DROPOUT_FIT:
            raise Failed(f"{train} equals its eval-mode value: nothing is dropped ({where})")
        readings = {
            "the kept entries are not scaled by 1/(1-p) (nn.Dropout scales them so that the expected value "
            "stays the same)": (kept, zero),
            "the kept entries are multiplied by (1-p) instead of divided by it": (kept * (1 - p), zero),
            **(alternatives or {})}
        fits = {sentence: _dropout_share(actual, informative, *values)
                for sentence, values in readings.items()}
        sentence, fit = max(fits.items(), key=lambda item: item[1])
        if fit >= DROPOUT_FIT:
            raise Failed(f"{train} matches what you get when {sentence} ({where})")
        survived = informative & (actual.abs() > 1e-9)
        ratio = actual[survived] / kept[survived]
        if survived.any() and (ratio - ratio.mean()).abs().max() < 1e-6 * ratio.mean().abs():
            scale = ratio.mean().item()
            raise Failed(f"{train}: the kept entries are scaled by {scale:.4g} = 1/(1-{1 - 1 / scale:.3g}) "
                         f"instead of 1/(1-p) = {1 / (1 - p):.4g}: is the dropout built with the rate passed "
                         f"in? ({where})")
        unexplained = 1 - _dropout_share(actual, informative, kept / (1 - p), zero)
        raise Failed(f"{train}: {unexplained:.0%} of its entries are neither dropped (0) nor their eval-mode "
                     f"value scaled by 1/(1-p): the dropout is not where the contract puts it ({where})")
    rate = (actual[informative].abs() <= 1e-9).double().mean().item()
    expect(abs(rate - p) < DROPOUT_RATE_SLACK,
           f"{train}: {rate:.1%} of its entries are dropped, expected about {p:.0%}: each entry is dropped "
           f"with probability p ({where})")


# ---------------------------------------------------------------------------- telling counterexamples
def _said(error: Failed | StudentError) -> str:
    return f"your code raised {error}" if isinstance(error, StudentError) else str(error)


def _edge(error: Failed | StudentError) -> str:
    """The edge case, after the typical input's failure: a crash quoted, another failure (a variant of
    the typical one) only located (the judge appends its input)."""
    if isinstance(error, StudentError):
        return f"It also fails on an edge case: your code raised {error}"
    return "It fails on an edge case too"


def telling(degenerate: Callable[..., bool], typical: Mapping[str, object]) -> Callable:
    """Decorate a case's body (under @given): when it fails on a degenerate input (where the usual
    mistakes look alike or crash: a width of 2, warmup_steps = total_steps), it runs once more with
    every argument at its `typical` value, and the message leads with what happens there (which
    names the mistake when a diagnosis matches it): hypothesis shrinks to the degenerate input, but
    a student reads the first line and fixes what it says. The edge case comes second, or alone
    where the typical input passes. The student's NotImplementedError goes through untouched."""
    def decorate(body: Callable) -> Callable:
        arguments = list(inspect.signature(body).parameters)[1:]
        if missing := [name for name in arguments if name not in typical]:
            raise TypeError(f"telling: no typical value for {', '.join(missing)} of {body.__name__}")

        @functools.wraps(body)
        def run(student: object, **kwargs: object) -> object:
            try:
                return body(student, **kwargs)
            except (Failed, StudentError) as error:
                if isinstance(error, StudentError) and error.type_name == "NotImplementedError":
                    raise
                if not degenerate(**kwargs):
                    raise
                other = {name: typical[name] for name in kwargs}
                shown = ", ".join(f"{k}={v!r}" for k, v in other.items())
                try:
                    body(student, **other)
                except (Failed, StudentError) as there:
                    raise Failed(f"on a typical input ({shown}): {_said(there)}. {_edge(error)}") from error
                raise Failed(f"{_said(error)}. On a typical input ({shown}) this test passes: only this edge "
                             "case fails") from error
        return run
    return decorate
