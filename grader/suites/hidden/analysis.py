"""analysis.py, hidden: attention_entropy (X1), previous_token_score (X2), induction_score (X3) and
attention_maps against the student's own model, with the classic mistakes named.

attention_maps_matches_model runs the student's own TinyTransformerLM and compares with that
model's own weights, so a mistake inside the model costs the model's tests, not these.
"""
import math

import torch
from hypothesis import example, given
from hypothesis import strategies as st

from ...spec import TOLERANCES, Visibility
from .. import Suite
from ..checks import Failed, expect_close, expect_tensor
from ..fallback import in_runnable_dtype
from ..public.analysis import (
    LM,
    expect_no_graph,
    judged_config,
    lm_configs,
    model_probe,
    own_weights,
    past_positional,
    periods,
    tokens,
)
from ..public.block import perturb_own
from ..strategies import batch_dims, dtypes, randn, seeds
from ..strategies import causal as causal_mask
from .reference import ref

suite = Suite("analysis", Visibility.HIDDEN)


def _softmaxed(seed: int, lead: tuple, n_q: int, n_k: int, dtype: torch.dtype, causal: bool) -> torch.Tensor:
    """Random attention weights (rows sum to 1), exactly 0 above the diagonal when causal."""
    scores = 2.0 * randn(seed, *lead, n_q, n_k)
    if causal:
        scores = scores.masked_fill(~causal_mask(max(n_q, n_k))[:n_q, :n_k], float("-inf"))
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
        "the mean is taken over the keys axis and the sum over the queries (axes swapped)":
            -plogp.sum(-2).mean(-1),
    }


@suite.case(1)
@given(lead=batch_dims, n_q=st.integers(1, 7), n_k=st.integers(1, 7), seed=seeds, dtype=dtypes,
       causal=st.booleans())
def attention_entropy_matches_reference(student, lead, n_q, n_k, seed, dtype, causal):
    """attention_entropy matches (X1) on random softmaxed weights with leading dims (causal ones hold exact
    zeros)"""
    weights = _softmaxed(seed, lead, n_q, n_k, dtype, causal)
    expect_close(student.call("analysis.attention_entropy", weights), ref.analysis.attention_entropy(weights),
                 "attention_entropy(weights)", **TOLERANCES[dtype]._asdict(),
                 diagnoses=lambda: _entropy_variants(weights),
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
        variants["it reads weights[i, i - 2] instead of the previous token weights[i, i - 1]"] = \
            _stripe(w, -2).mean(-1)
    return variants


# ---------------------------------------------------------------------------- induction_score (X3)
def _induction_variants(weights: torch.Tensor, period: int) -> dict[str, torch.Tensor]:
    w, n = weights.to(torch.float64), weights.size(-2)
    stripe = _stripe(w, 1 - period)
    variants = {
        "it reads weights[i, i - period] (the earlier occurrence itself) instead of the token after it, "
        "weights[i, i - period + 1]": _stripe(w, -period).mean(-1),
        "queries i < period are included (the mean must run over the queries i >= period only)":
            stripe.mean(-1),
        "the stripe is divided by n_q instead of averaged over the queries i >= period":
            stripe[..., 1:].sum(-1) / n,
    }
    if period + 1 < n:
        variants["it reads weights[i, i - period - 1] instead of weights[i, i - period + 1]"] = \
            _stripe(w, -period - 1).mean(-1)
    if period >= 2:
        variants["it reads weights[i, i - period + 2] instead of weights[i, i - period + 1]"] = \
            _stripe(w, 2 - period)[..., 2:].mean(-1)
    return variants


@suite.case(1)
@given(lead=batch_dims, shape=periods(), seed=seeds, dtype=dtypes, causal=st.booleans())
def stripe_scores_match_reference(student, lead, shape, seed, dtype, causal):
    """previous_token_score (X2) and induction_score (X3) match the reference on random softmaxed weights"""
    period, n = shape
    weights = _softmaxed(seed, lead, n, n, dtype, causal)
    tol = TOLERANCES[dtype]._asdict()
    expect_close(student.call("analysis.previous_token_score", weights),
                 ref.analysis.previous_token_score(weights), "previous_token_score(weights)",
                 **tol, diagnoses=lambda: _previous_variants(weights),
                 hint="the mean over the queries i >= 1 of weights[..., i, i - 1]")
    expect_close(student.call("analysis.induction_score", weights, period),
                 ref.analysis.induction_score(weights, period), f"induction_score(weights, period={period})",
                 **tol, diagnoses=lambda: _induction_variants(weights, period),
                 hint="the mean over the queries i >= period of weights[..., i, i - period + 1]")


# ---------------------------------------------------------------------------- attention_maps
# A model's mistake shows in the maps only past its first layer when pre-norm (the first attn
# reads norm1(x) either way): one such model always, not only when the draws happen to hold one.
@suite.case(2, timeout=20, max_examples=8)
@example(config={"model": {"vocab_size": 5, "d_model": 8, "n_heads": 2, "n_layers": 2, "d_ff": 6,
                           "max_len": 6, "dropout": 0.5, "norm": "pre", "pos_encoding": "sinusoidal"},
                 "B": 2, "T": 5}, seed=1)
@given(config=lm_configs(), seed=seeds)
@past_positional
def attention_maps_matches_model(student, config, seed):
    """attention_maps of a TinyTransformerLM (its parameters perturbed) are its own eval-mode weights, in any
    mode, without grad"""
    model_config, B, T = config["model"], config["B"], config["T"]
    idx = tokens(seed, model_config["vocab_size"], B, T)

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        judged = judged_config(student, model_config, idx, dtype)
        model = perturb_own(student.call(LM, **judged).to(dtype), seed).train()
        shape = (model_config["n_layers"], B, model_config["n_heads"], T, T)
        maps = expect_tensor(student.call("analysis.attention_maps", model, idx), shape,
                             "attention_maps(model, idx)")
        expect_no_graph(student, model.train(), idx, maps)
        expected = own_weights(model, idx, shape)
        tol = TOLERANCES[dtype]._asdict()
        if torch.allclose(maps.double(), expected.double(), **tol):
            return
        setting = ", ".join(f"{k}={v!r}" for k, v in judged.items())
        in_eval = student.call("analysis.attention_maps", model.eval(), idx)
        if (isinstance(in_eval, torch.Tensor) and in_eval.shape == expected.shape
                and torch.allclose(in_eval.double(), expected.double(), **tol)):
            raise Failed("attention_maps differs from your model's own weights when the model is in train "
                         "mode, and matches them in eval mode: dropout is on; call model.eval() (and "
                         f"torch.no_grad()) inside attention_maps [TinyTransformerLM({setting})]")
        expect_close(maps, expected, "attention_maps(model, idx)", **tol,
                     hint="stack the per-layer weights of model(idx, return_weights=True) in eval mode along "
                          f"a new first axis [TinyTransformerLM({setting})]")
    in_runnable_dtype(check, model_probe(student, model_config, idx), torch.float64)
