"""analysis.py, public: attention_entropy (X1), previous_token_score (X2) and induction_score (X3)
on weights whose statistics are known, and attention_maps' contract.

attention_maps runs the student's own TinyTransformerLM: it is compared with that model's own
weights, so a mistake inside the model costs the model's tests, not these.
"""
import functools
from collections.abc import Callable

import torch
from hypothesis import given
from hypothesis import strategies as st

from ...sandbox.errors import StudentError
from ...spec import NORMS, POS_ENCODINGS, TOLERANCES, Visibility
from .. import Suite
from ..checks import Failed, expect, expect_close, expect_tensor
from ..fallback import in_runnable_dtype, may_fall_back
from ..strategies import batch_dims, dtypes, random_mask, seeds

suite = Suite("analysis", Visibility.PUBLIC)
LM = "model.TinyTransformerLM"


def rand(seed: int, *shape: int) -> torch.Tensor:
    """Seeded uniform [0, 1) float64 values."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@st.composite
def periods(draw: st.DrawFn) -> tuple[int, int]:
    """(period, n) with 1 <= period < n: a sequence of n tokens repeating every `period`."""
    period = draw(st.integers(1, 4))
    return period, period + draw(st.integers(1, 5))


@st.composite
def lm_configs(draw: st.DrawFn) -> dict:
    """A tiny TinyTransformerLM config with dropout (so that train mode shows) and B, T <= max_len."""
    n_heads = draw(st.integers(1, 3))
    max_len = draw(st.integers(2, 7))
    return {
        "model": {"vocab_size": draw(st.integers(2, 9)), "d_model": n_heads * draw(st.sampled_from([2, 4])),
                  "n_heads": n_heads, "n_layers": draw(st.integers(1, 3)), "d_ff": draw(st.integers(1, 12)),
                  "max_len": max_len, "dropout": 0.5, "norm": draw(st.sampled_from(NORMS)),
                  "pos_encoding": draw(st.sampled_from(POS_ENCODINGS))},
        "B": draw(st.integers(1, 3)), "T": draw(st.integers(2, max_len)),
    }


def past_positional(body: Callable) -> Callable:
    """Decorate a case that runs the student's TinyTransformerLM (its config drawn by lm_configs):
    when the student's positional.py raises on this draw (a width its sinusoidal table cannot
    handle, say), run it again with pos_encoding="none", which calls no positional function. The
    maps' contract is the same with any encoding, and the positional tests charge the crash."""
    @functools.wraps(body)
    def run(student: object, config: dict, **kwargs: object) -> object:
        try:
            return body(student, config=config, **kwargs)
        except StudentError as error:
            if error.file != "positional.py" or config["model"]["pos_encoding"] == "none":
                raise
        without = {**config, "model": {**config["model"], "pos_encoding": "none"}}
        return body(student, config=without, **kwargs)
    return run


def tokens(seed: int, vocab_size: int, B: int, T: int) -> torch.Tensor:
    return torch.randint(vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def model_probe(student: object, model_config: dict, idx: torch.Tensor) -> Callable[[torch.dtype], object]:
    """What decides the dtype attention_maps is checked in (fallback.in_runnable_dtype): the student's own
    TinyTransformerLM run on idx in a dtype."""
    def run(wanted: torch.dtype) -> object:
        return student.call(LM, **model_config).to(wanted).eval()(idx, return_weights=True)
    return run


def own_weights(model, idx: torch.Tensor, shape: tuple) -> torch.Tensor:
    """The model's own forward(idx, return_weights=True) weights, stacked, in eval mode."""
    model.eval()
    result = model(idx, return_weights=True)
    expect(isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], (list, tuple))
           and len(result[1]) == shape[0] and all(isinstance(w, torch.Tensor) for w in result[1]),
           "your TinyTransformerLM's forward(idx, return_weights=True) should return "
           "(logits, [weights per layer]) (fix model first)")
    return torch.stack(list(result[1]))


def judged_config(student: object, model_config: dict, idx: torch.Tensor, dtype: torch.dtype) -> dict:
    """model_config, or the same with dropout=0 where the student's own model drops in eval mode too (its
    attention, feed-forward network, block or model does, and one of their tests failed: those tests charge
    it): attention_maps cannot turn off what eval() leaves on, and is judged on the rest."""
    if not model_config["dropout"] or not may_fall_back():
        return model_config
    model = student.call(LM, **model_config).to(dtype).eval()
    shape = (model_config["n_layers"], *idx.shape[:1], model_config["n_heads"], idx.shape[1], idx.shape[1])
    if torch.equal(own_weights(model, idx, shape), own_weights(model, idx, shape)):
        return model_config
    return {**model_config, "dropout": 0.0}


# ---------------------------------------------------------------------------- attention_entropy (X1)
@suite.case(1)
@given(lead=batch_dims, n_q=st.integers(1, 6), n_k=st.integers(1, 7), seed=seeds, dtype=dtypes)
def attention_entropy_properties(student, lead, n_q, n_k, seed, dtype):
    """attention_entropy: uniform rows over k keys give log(k), one-hot rows 0, and 0 log 0 counts as 0"""
    allowed = random_mask(seed, *lead, n_q, n_k)  # at least one key per row
    uniform = (allowed / allowed.sum(-1, keepdim=True)).to(dtype)
    expected = allowed.sum(-1).double().log().mean(-1)
    expect_close(student.call("analysis.attention_entropy", uniform), expected, "attention_entropy(weights)",
                 **TOLERANCES[dtype]._asdict(),
                 hint="rows uniform over k allowed keys (0 elsewhere) have entropy log(k); take the mean "
                      "over the queries of -sum_k p log p, with 0 log 0 = 0 (torch.special.xlogy)")
    first = allowed.cumsum(-1).eq(1) & allowed
    one_hot = first.to(dtype)
    actual = expect_tensor(student.call("analysis.attention_entropy", one_hot), lead,
                           "attention_entropy(one-hot weights)")
    expect(bool(torch.isfinite(actual).all()),
           "attention_entropy of one-hot rows is NaN or inf: 0 log 0 must count as 0 "
           "(torch.special.xlogy(p, p))")
    expect(actual.abs().max().item() < 1e-6,
           f"attention_entropy of one-hot rows is {actual.abs().max().item():.3g}, expected 0")


# ---------------------------------------------------------------------------- previous_token_score (X2)
def _shift_pattern(seed: int, lead: tuple, n: int, offset: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows i >= offset put c_i on key i - offset and 1 - c_i on key i; rows i < offset attend to
    themselves. Returns the weights and c (the stripe's values, rows i >= offset)."""
    c = rand(seed, *lead, n - offset)
    weights = torch.zeros(*lead, n, n, dtype=torch.float64)
    rows = torch.arange(n)
    weights[..., rows, rows] = 1.0
    i = torch.arange(offset, n)
    weights[..., i, i] = 1.0 - c
    weights[..., i, i - offset] = c
    return weights.to(dtype), c


@suite.case(1)
@given(lead=batch_dims, n=st.integers(2, 8), seed=seeds, dtype=dtypes)
def previous_token_score_properties(student, lead, n, seed, dtype):
    """previous_token_score is 1 on a shifted identity, 0 on the identity, the mean of weights[i, i - 1]
    otherwise"""
    shifted = torch.zeros(*lead, n, n, dtype=dtype)
    shifted[..., 0, 0] = 1.0
    shifted[..., torch.arange(1, n), torch.arange(n - 1)] = 1.0
    actual = expect_tensor(student.call("analysis.previous_token_score", shifted), lead,
                           f"previous_token_score of a ({n}, {n}) shifted identity")
    expect(bool(torch.allclose(actual.double(), torch.ones(lead, dtype=torch.float64), atol=1e-6)),
           f"previous_token_score of a shifted identity (every query i >= 1 attends only to i - 1) is "
           f"{actual.flatten()[0].item():.4g}, expected 1: average weights[i, i - 1] over the queries i >= 1")
    identity = torch.eye(n, dtype=dtype).expand(*lead, n, n).contiguous()
    actual = expect_tensor(student.call("analysis.previous_token_score", identity), lead,
                           "previous_token_score of the identity")
    expect(bool(torch.allclose(actual.double(), torch.zeros(lead, dtype=torch.float64), atol=1e-6)),
           f"previous_token_score of the identity (every query attends to itself) is "
           f"{actual.flatten()[0].item():.4g}, expected 0: read weights[i, i - 1], "
           "not the diagonal weights[i, i]")
    mixed, c = _shift_pattern(seed, lead, n, 1, dtype)
    expect_close(student.call("analysis.previous_token_score", mixed), c.mean(-1),
                 "previous_token_score(weights)", atol=1e-6, rtol=1e-5,
                 hint="query i puts c_i on key i - 1: the score is the mean of c_i over the queries i >= 1")


# ---------------------------------------------------------------------------- induction_score (X3)
@suite.case(1)
@given(lead=batch_dims, shape=periods(), seed=seeds, dtype=dtypes)
def induction_score_properties(student, lead, shape, seed, dtype):
    """induction_score is 1 when every query i >= period attends to i - period + 1, and the stripe's mean
    otherwise"""
    period, n = shape
    # an induction stripe: rows i >= period all on key i - period + 1, rows before on themselves
    perfect = torch.zeros(*lead, n, n, dtype=dtype)
    perfect[..., torch.arange(period), torch.arange(period)] = 1.0
    i = torch.arange(period, n)
    perfect[..., i, i - period + 1] = 1.0
    actual = expect_tensor(student.call("analysis.induction_score", perfect, period), lead,
                           f"induction_score(weights, period={period})")
    expect(bool(torch.allclose(actual.double(), torch.ones(lead, dtype=torch.float64), atol=1e-6)),
           f"induction_score(weights, period={period}) is {actual.flatten()[0].item():.4g} for a perfect "
           f"induction head (every query i >= {period} attends only to i - period + 1, the token after the "
           "previous occurrence of token i), expected 1")
    # c_i on the previous occurrence i - period, 1 - c_i on the token after it, i - period + 1
    c = rand(seed, *lead, n - period)
    mixed = torch.zeros(*lead, n, n, dtype=torch.float64)
    mixed[..., torch.arange(period), torch.arange(period)] = 1.0
    mixed[..., i, i - period] = c
    mixed[..., i, i - period + 1] += 1.0 - c
    mixed = mixed.to(dtype)
    expected = (1.0 - c).mean(-1)
    expect_close(student.call("analysis.induction_score", mixed, period), expected,
                 f"induction_score(weights, period={period})", atol=1e-6, rtol=1e-5,
                 hint="average weights[i, i - period + 1] over the queries i >= period")


# ---------------------------------------------------------------------------- attention_maps
def expect_no_graph(student, model, idx: torch.Tensor, maps: torch.Tensor) -> None:
    """attention_maps(model, idx) holds no autograd graph (docs/spec.md: no grad). Tensors come back
    detached, so the worker is asked to backpropagate through the result: torch refuses unless a
    graph was built."""
    try:
        student.grad("analysis.attention_maps", [model, idx], grad_outputs=[torch.ones_like(maps)])
    except StudentError as error:
        if error.type_name == "RuntimeError" and "grad" in error.message:
            return
        raise
    raise Failed("attention_maps(model, idx) returns a tensor that requires grad: it built an autograd graph "
                 "through the model; run the model under torch.no_grad() inside attention_maps")


@suite.case(1, timeout=20, max_examples=6)
@given(config=lm_configs(), seed=seeds)
@past_positional
def attention_maps_contract(student, config, seed):
    """attention_maps gives (n_layers, B, n_heads, T, T): the model's own eval-mode weights, even from train
    mode, without grad"""
    model_config, B, T = config["model"], config["B"], config["T"]
    idx = tokens(seed, model_config["vocab_size"], B, T)

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        judged = judged_config(student, model_config, idx, dtype)
        model = student.call(LM, **judged).to(dtype).train()
        shape = (model_config["n_layers"], B, model_config["n_heads"], T, T)
        maps = expect_tensor(student.call("analysis.attention_maps", model, idx), shape,
                             "attention_maps(model, idx)")
        model.train()
        again = student.call("analysis.attention_maps", model, idx)
        expect(isinstance(again, torch.Tensor) and torch.equal(maps, again),
               "two calls of attention_maps on the same model (left in train mode, "
               f"dropout={judged['dropout']:g}) and tokens differ: run the model in eval mode inside "
               "attention_maps (model.eval() and torch.no_grad()), so dropout is off")
        # the same model run twice, once maybe under no_grad: only summation order may differ (in float64,
        # far below 1e-9)
        tol = {"atol": 1e-9, "rtol": 1e-7} if dtype == torch.float64 else TOLERANCES[dtype]._asdict()
        expect_close(maps, own_weights(model, idx, shape), "attention_maps(model, idx)", **tol,
                     hint="it should stack the weights of model(idx, return_weights=True) in eval mode along "
                          "a new first axis (n_layers, B, n_heads, T, T)")
        expect_no_graph(student, model, idx, maps)
    in_runnable_dtype(check, model_probe(student, model_config, idx), torch.float64)
