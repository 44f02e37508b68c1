"""analysis.py: attention_entropy (X1), previous_token_score (X2), induction_score (X3), attention_maps (8 points).

The statistics are tested on weights built here; attention_maps runs the student's own
TinyTransformerLM (with the reference's parameters), so it also depends on model.py.
"""
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ..reference import ref
from . import Suite
from .checks import Failed, expect, expect_close, expect_tensor
from .pairs import twins
from .strategies import batch_dims, dtypes, randn, random_mask, seeds

suite = Suite("analysis")
LM = "model.TinyTransformerLM"


def _rand(seed: int, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _softmaxed(seed: int, lead: tuple, n_q: int, n_k: int, dtype: torch.dtype, causal: bool) -> torch.Tensor:
    """Random attention weights (rows sum to 1), exactly 0 above the diagonal when causal."""
    scores = 2.0 * randn(seed, *lead, n_q, n_k)
    if causal:
        scores = scores.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1).to(dtype)


def _stripe(weights: torch.Tensor, offset: int) -> torch.Tensor:
    """weights[..., i, i + offset] for every i where it exists."""
    return weights.diagonal(offset=offset, dim1=-2, dim2=-1)


# ---------------------------------------------------------------------------- attention_entropy (X1)
def _entropy_variants(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    w = weights.to(torch.float64)
    plogp = torch.special.xlogy(w, w)
    nats = -plogp.sum(-1).mean(-1)
    return {
        "the log is base 2 (bits) instead of the natural log (nats): use torch.log": nats / math.log(2),
        "the entropies are summed over the queries instead of averaged": -plogp.sum(-1).sum(-1),
        "p log p is averaged over the keys instead of summed": -plogp.mean(-1).mean(-1),
        "the minus sign is missing (-sum p log p is >= 0)": -nats,
        "the mean is taken over the keys axis and the sum over the queries (axes swapped)": -plogp.sum(-2).mean(-1),
    }


def _entropy_call(student, weights: torch.Tensor) -> torch.Tensor:
    return student.call("analysis.attention_entropy", weights)


@suite.case(1, public=True)
@given(lead=batch_dims, n_q=st.integers(1, 6), n_k=st.integers(1, 7), seed=seeds, dtype=dtypes)
def attention_entropy_properties(student, lead, n_q, n_k, seed, dtype):
    """attention_entropy: uniform rows over k keys give log(k), one-hot rows 0, and 0 log 0 counts as 0"""
    allowed = random_mask(seed, *lead, n_q, n_k)  # at least one key per row
    uniform = (allowed / allowed.sum(-1, keepdim=True)).to(dtype)
    expected = allowed.sum(-1).double().log().mean(-1)
    expect_close(_entropy_call(student, uniform), expected, "attention_entropy(weights)",
                 atol=1e-5 if dtype == torch.float32 else 1e-9, rtol=1e-5,
                 diagnoses=_entropy_variants(uniform),
                 hint="rows uniform over k allowed keys (0 elsewhere) have entropy log(k); take the mean over the "
                      "queries of -sum_k p log p, with 0 log 0 = 0 (torch.special.xlogy)")
    first = allowed.cumsum(-1).eq(1) & allowed
    one_hot = first.to(dtype)
    actual = expect_tensor(_entropy_call(student, one_hot), lead, "attention_entropy(one-hot weights)")
    expect(bool(torch.isfinite(actual).all()),
           "attention_entropy of one-hot rows is NaN or inf: 0 log 0 must count as 0 (torch.special.xlogy(p, p))")
    expect(actual.abs().max().item() < 1e-6,
           f"attention_entropy of one-hot rows is {actual.abs().max().item():.3g}, expected 0")


@suite.case(1)
@given(lead=batch_dims, n_q=st.integers(1, 7), n_k=st.integers(1, 7), seed=seeds, dtype=dtypes,
       causal=st.booleans())
def attention_entropy_matches_reference(student, lead, n_q, n_k, seed, dtype, causal):
    """attention_entropy matches (X1) on random softmaxed weights with leading dims (causal ones hold exact zeros)"""
    weights = _softmaxed(seed, lead, n_q, n_k, dtype, causal)
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-9, "rtol": 1e-7}
    expect_close(_entropy_call(student, weights), ref.analysis.attention_entropy(weights),
                 "attention_entropy(weights)", **tol, diagnoses=_entropy_variants(weights),
                 hint="mean over queries of -sum_k p ln p, reducing only the last two axes, 0 log 0 = 0")


# ---------------------------------------------------------------------------- previous_token_score (X2)
def _previous_variants(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    w, n = weights.to(torch.float64), weights.size(-2)
    variants = {
        "it reads the diagonal weights[i, i] instead of the previous token weights[i, i - 1]":
            _stripe(w, 0)[..., 1:].mean(-1),
        "it reads the whole diagonal weights[i, i] instead of the previous token weights[i, i - 1]":
            _stripe(w, 0).mean(-1),
        "the previous-token stripe is divided by n_q instead of averaged over the n_q - 1 queries i >= 1":
            _stripe(w, -1).sum(-1) / n,
        "it reads weights[i - 1, i] (the next token) instead of weights[i, i - 1]": _stripe(w, 1).mean(-1),
    }
    if n >= 3:
        variants["it reads weights[i, i - 2] instead of the previous token weights[i, i - 1]"] = _stripe(w, -2).mean(-1)
    return variants


def _shift_pattern(seed: int, lead: tuple, n: int, offset: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows i >= offset put c_i on key i - offset and 1 - c_i on key i; rows i < offset attend to
    themselves. Returns the weights and c (the stripe's values, rows i >= offset)."""
    c = _rand(seed, *lead, n - offset)
    weights = torch.zeros(*lead, n, n, dtype=torch.float64)
    rows = torch.arange(n)
    weights[..., rows, rows] = 1.0
    i = torch.arange(offset, n)
    weights[..., i, i] = 1.0 - c
    weights[..., i, i - offset] = c
    return weights.to(dtype), c


@suite.case(1, public=True)
@given(lead=batch_dims, n=st.integers(2, 8), seed=seeds, dtype=dtypes)
def previous_token_score_properties(student, lead, n, seed, dtype):
    """previous_token_score is 1 on a shifted identity, 0 on the identity, the mean of weights[i, i - 1] otherwise"""
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
           f"previous_token_score of the identity (every query attends to itself) is {actual.flatten()[0].item():.4g}, "
           "expected 0: read weights[i, i - 1], not the diagonal weights[i, i]")
    mixed, c = _shift_pattern(seed, lead, n, 1, dtype)
    expect_close(student.call("analysis.previous_token_score", mixed), c.mean(-1), "previous_token_score(weights)",
                 atol=1e-6, rtol=1e-5, diagnoses=_previous_variants(mixed),
                 hint="query i puts c_i on key i - 1: the score is the mean of c_i over the queries i >= 1")


# ---------------------------------------------------------------------------- induction_score (X3)
def _induction_variants(weights: torch.Tensor, period: int) -> dict[str, torch.Tensor]:
    w, n = weights.to(torch.float64), weights.size(-2)
    stripe = _stripe(w, 1 - period)
    variants = {
        "it reads weights[i, i - period] (the earlier occurrence itself) instead of the token after it, "
        "weights[i, i - period + 1]": _stripe(w, -period).mean(-1),
        "queries i < period are included (the mean must run over the queries i >= period only)": stripe.mean(-1),
        "the stripe is divided by n_q instead of averaged over the queries i >= period": stripe[..., 1:].sum(-1) / n,
    }
    if period + 1 < n:
        variants["it reads weights[i, i - period - 1] instead of weights[i, i - period + 1]"] = \
            _stripe(w, -period - 1).mean(-1)
    if period >= 2:
        variants["it reads weights[i, i - period + 2] instead of weights[i, i - period + 1]"] = \
            _stripe(w, 2 - period)[..., 2:].mean(-1)
    return variants


@st.composite
def periods(draw: st.DrawFn) -> tuple[int, int]:
    """(period, n) with 1 <= period < n: a sequence of n tokens repeating every `period`."""
    period = draw(st.integers(1, 4))
    return period, period + draw(st.integers(1, 5))


@suite.case(1, public=True)
@given(lead=batch_dims, shape=periods(), seed=seeds, dtype=dtypes)
def induction_score_properties(student, lead, shape, seed, dtype):
    """induction_score is 1 when every query i >= period attends to i - period + 1, and the stripe's mean otherwise"""
    period, n = shape
    # an induction stripe: rows i >= period all on key i - period + 1, rows before on themselves
    perfect = torch.zeros(*lead, n, n, dtype=dtype)
    perfect[..., torch.arange(period), torch.arange(period)] = 1.0
    i = torch.arange(period, n)
    perfect[..., i, i - period + 1] = 1.0
    actual = expect_tensor(student.call("analysis.induction_score", perfect, period), lead,
                           f"induction_score(weights, period={period})")
    expect(bool(torch.allclose(actual.double(), torch.ones(lead, dtype=torch.float64), atol=1e-6)),
           f"induction_score(weights, period={period}) is {actual.flatten()[0].item():.4g} for a perfect induction "
           f"head (every query i >= {period} attends only to i - period + 1, the token after the previous occurrence "
           "of token i), expected 1")
    # c_i on the previous occurrence i - period, 1 - c_i on the token after it, i - period + 1
    c = _rand(seed, *lead, n - period)
    mixed = torch.zeros(*lead, n, n, dtype=torch.float64)
    mixed[..., torch.arange(period), torch.arange(period)] = 1.0
    mixed[..., i, i - period] = c
    mixed[..., i, i - period + 1] += 1.0 - c
    mixed = mixed.to(dtype)
    expected = (1.0 - c).mean(-1)
    expect_close(student.call("analysis.induction_score", mixed, period), expected,
                 f"induction_score(weights, period={period})", atol=1e-6, rtol=1e-5,
                 diagnoses=_induction_variants(mixed, period),
                 hint="average weights[i, i - period + 1] over the queries i >= period")


@suite.case(1)
@given(lead=batch_dims, shape=periods(), seed=seeds, dtype=dtypes, causal=st.booleans())
def stripe_scores_match_reference(student, lead, shape, seed, dtype, causal):
    """previous_token_score (X2) and induction_score (X3) match the reference on random softmaxed weights"""
    period, n = shape
    weights = _softmaxed(seed, lead, n, n, dtype, causal)
    tol = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-8}
    expect_close(student.call("analysis.previous_token_score", weights), ref.analysis.previous_token_score(weights),
                 "previous_token_score(weights)", **tol, diagnoses=_previous_variants(weights),
                 hint="the mean over the queries i >= 1 of weights[..., i, i - 1]")
    expect_close(student.call("analysis.induction_score", weights, period),
                 ref.analysis.induction_score(weights, period), f"induction_score(weights, period={period})",
                 **tol, diagnoses=_induction_variants(weights, period),
                 hint="the mean over the queries i >= period of weights[..., i, i - period + 1]")


# ---------------------------------------------------------------------------- attention_maps
@st.composite
def lm_configs(draw: st.DrawFn) -> dict:
    """A tiny TinyTransformerLM config with dropout (so that train mode shows) and B, T <= max_len."""
    n_heads = draw(st.integers(1, 3))
    max_len = draw(st.integers(2, 7))
    return {
        "model": {"vocab_size": draw(st.integers(2, 9)), "d_model": n_heads * draw(st.sampled_from([2, 4])),
                  "n_heads": n_heads, "n_layers": draw(st.integers(1, 3)), "d_ff": draw(st.integers(1, 12)),
                  "max_len": max_len, "dropout": 0.5, "norm": draw(st.sampled_from(["pre", "post"])),
                  "pos_encoding": draw(st.sampled_from(["sinusoidal", "learned", "rope", "alibi", "none"]))},
        "B": draw(st.integers(1, 3)), "T": draw(st.integers(2, max_len)),
    }


def _tokens(seed: int, vocab_size: int, B: int, T: int) -> torch.Tensor:
    return torch.randint(vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def _own_weights(model, idx: torch.Tensor, shape: tuple) -> torch.Tensor:
    """The model's own forward(idx, return_weights=True) weights, stacked, in eval mode."""
    model.eval()
    result = model(idx, return_weights=True)
    expect(isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], (list, tuple))
           and len(result[1]) == shape[0] and all(isinstance(w, torch.Tensor) for w in result[1]),
           "your TinyTransformerLM's forward(idx, return_weights=True) should return (logits, [weights per layer]) "
           "(fix model first)")
    return torch.stack(list(result[1]))


@suite.case(1, public=True, timeout=20)
@settings(max_examples=6)
@given(config=lm_configs(), seed=seeds)
def attention_maps_contract(student, config, seed):
    """attention_maps gives (n_layers, B, n_heads, T, T): the model's eval-mode weights, even from train mode"""
    model_config, B, T = config["model"], config["B"], config["T"]
    student.call("torch.manual_seed", seed)
    model = student.call(LM, **model_config).to(torch.float64).train()
    idx = _tokens(seed, model_config["vocab_size"], B, T)
    shape = (model_config["n_layers"], B, model_config["n_heads"], T, T)
    maps = expect_tensor(student.call("analysis.attention_maps", model, idx), shape, "attention_maps(model, idx)")
    expect(bool(torch.allclose(maps.sum(-1).double(), torch.ones(shape[:-1], dtype=torch.float64), atol=1e-6)),
           "the rows of attention_maps(model, idx) should sum to 1 (each is one query's weights over the keys)")
    future = maps.masked_fill(torch.ones(T, T, dtype=torch.bool).tril(), 0).abs().max().item()
    expect(future < 1e-9, f"attention_maps puts weight {future:.3g} on future keys: the model must be causal")
    model.train()
    again = student.call("analysis.attention_maps", model, idx)
    expect(isinstance(again, torch.Tensor) and torch.equal(maps, again),
           "two calls of attention_maps on the same model (left in train mode, dropout=0.5) and tokens differ: "
           "run the model in eval mode inside attention_maps (model.eval() and torch.no_grad()), so dropout is off")
    expect_close(maps, _own_weights(model, idx, shape), "attention_maps(model, idx)", atol=1e-9, rtol=1e-7,
                 hint="it should stack the weights of model(idx, return_weights=True) in eval mode along a new "
                      "first axis (n_layers, B, n_heads, T, T)")


@suite.case(2, timeout=20)
@settings(max_examples=8)
@given(config=lm_configs(), seed=seeds)
def attention_maps_matches_reference(student, config, seed):
    """attention_maps of a TinyTransformerLM with the reference's parameters gives the reference's maps, in any mode"""
    model_config, B, T = config["model"], config["B"], config["T"]
    model, reference = twins(student, LM, ref.model.TinyTransformerLM, seed, torch.float64, **model_config)
    model.train()
    idx = _tokens(seed, model_config["vocab_size"], B, T)
    shape = (model_config["n_layers"], B, model_config["n_heads"], T, T)
    expected = ref.analysis.attention_maps(reference, idx)
    maps = expect_tensor(student.call("analysis.attention_maps", model, idx), shape, "attention_maps(model, idx)")
    tol = {"atol": 1e-6, "rtol": 1e-5}
    if torch.allclose(maps.double(), expected.double(), **tol):
        return
    setting = ", ".join(f"{k}={v!r}" for k, v in model_config.items())
    model.eval()
    in_eval = student.call("analysis.attention_maps", model, idx)
    if (isinstance(in_eval, torch.Tensor) and in_eval.shape == expected.shape
            and torch.allclose(in_eval.double(), expected.double(), **tol)):
        raise Failed("attention_maps differs from the expected maps when the model is in train mode, and matches them "
                     "in eval mode: dropout is on; call model.eval() (and torch.no_grad()) inside attention_maps "
                     f"[TinyTransformerLM({setting})]")
    own = _own_weights(model, idx, shape)
    if own.shape != expected.shape or not torch.allclose(own.double(), expected.double(), **tol):
        raise Failed("your TinyTransformerLM's forward(idx, return_weights=True), loaded with the reference's "
                     "parameters, does not give the reference's attention weights, so neither can attention_maps: "
                     f"fix model first [TinyTransformerLM({setting})]")
    expect_close(maps, expected, "attention_maps(model, idx)", **tol,
                 hint="stack the per-layer weights of model(idx, return_weights=True) in eval mode along a new first "
                      f"axis [TinyTransformerLM({setting})]")
