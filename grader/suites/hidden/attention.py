"""attention.py, hidden cases (11 points): scaled_dot_product_attention (A1) and MultiHeadAttention
against the reference (values, gradients, dropout), naming classic mistakes."""
import math

import torch
from hypothesis import example, given
from hypothesis import strategies as st

from ...reference import ref
from ...spec import GRADIENT_TOLERANCE, TOLERANCES, Visibility
from .. import Suite
from ..checks import expect, expect_close
from ..public.attention import MHA, SDPA, qkv
from ..strategies import attention_shapes, causal, dtypes, mha_configs, randn, random_mask, seeds
from ..twins import reference_grads, twins

suite = Suite("attention", Visibility.HIDDEN)

# At least 3 positions, so that dropout has enough attention weights to change y visibly.
_dropout_configs = mha_configs(rope=False).map(lambda config: {**config, "T": max(config["T"], 3)})


def _sdpa_variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """What classic mistakes return, for the feedback (computed here, never shown)."""
    d = q.size(-1)

    def attend(scores: torch.Tensor, axis: int = -1, m: torch.Tensor | None = mask) -> torch.Tensor:
        if bias is not None:
            scores = scores + bias
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        w = torch.softmax(scores, dim=axis).nan_to_num(0.0)
        return w @ v

    raw = q @ k.transpose(-2, -1)
    variants = {
        "the scores are not divided by sqrt(d_k)": attend(raw),
        "the scores are divided by d_k instead of sqrt(d_k)": attend(raw / d),
        "the softmax runs over the query axis (dim=-2) instead of the keys":
            attend(raw / math.sqrt(d), axis=-2),
    }
    if mask is not None:
        variants["the mask is ignored"] = attend(raw / math.sqrt(d), m=None)
        variants["the mask is read the other way round (True must mean allowed)"] = attend(raw / math.sqrt(d),
                                                                                           m=~mask)
    return variants


@suite.case(4)
@given(shape=attention_shapes(), seed=seeds, dtype=dtypes, masked=st.booleans(), biased=st.booleans())
def sdpa_matches_reference(student, shape, seed, dtype, masked, biased):
    """scaled_dot_product_attention matches (A1) on random q, k, v, masks and biases"""
    q, k, v = qkv(shape, seed, dtype)
    mask = random_mask(seed + 3, shape["n_q"], shape["n_k"]) if masked else None
    bias = randn(seed + 4, shape["n_q"], shape["n_k"], dtype=dtype) if biased else None
    out, weights = student.call(SDPA, q, k, v, mask=mask, bias=bias)
    expected_out, expected_weights = ref.attention.scaled_dot_product_attention(q, k, v, mask, bias)
    tol = TOLERANCES[dtype]._asdict()
    expect_close(out, expected_out, "out", **tol, hint="out should be weights @ v",
                 diagnoses=lambda: _sdpa_variants(q, k, v, mask, bias))
    expect_close(weights, expected_weights, "weights", **tol,
                 hint="is it softmax(q k^T / sqrt(d_k) + bias) over the keys, with masked keys at 0?")


@suite.case(2)
@given(shape=attention_shapes(), seed=seeds, masked=st.booleans())
def sdpa_gradients(student, shape, seed, masked):
    """gradients of scaled_dot_product_attention w.r.t. q, k, v and bias equal the reference's (float64)"""
    q, k, v = qkv(shape, seed, torch.float64)
    bias = randn(seed + 4, shape["n_q"], shape["n_k"])
    mask = random_mask(seed + 3, shape["n_q"], shape["n_k"]) if masked else None
    grad_out = randn(seed + 5, *shape["lead"], shape["n_q"], shape["d_v"])
    _, grads, _ = student.grad(SDPA, [q, k, v, mask, bias], grad_outputs=[grad_out, None], wrt=(0, 1, 2, 4))
    inputs = [t.clone().requires_grad_(True) for t in (q, k, v, bias)]
    out, _ = ref.attention.scaled_dot_product_attention(inputs[0], inputs[1], inputs[2], mask, inputs[3])
    out.backward(grad_out)
    for index, name, x in zip((0, 1, 2, 4), ("q", "k", "v", "bias"), inputs, strict=True):
        expect(grads.get(index) is not None,
               f"no gradient reaches {name}: is the graph cut (.detach(), .item(), numpy)?")
        expect_close(grads[index], x.grad, f"d(out)/d({name})", **GRADIENT_TOLERANCE._asdict())


def _mha_inputs(config: dict, seed: int, dtype: torch.dtype, masked: bool) -> tuple:
    B, T, H = config["B"], config["T"], config["n_heads"]
    x = randn(seed, B, T, config["d_model"], dtype=dtype)
    mask = causal(T) if masked else None
    bias = randn(seed + 1, H, T, T, dtype=dtype)
    return x, mask, bias


def _mha_twins(student, config: dict, seed: int, dtype: torch.dtype, **kwargs) -> tuple:
    return twins(student, MHA, ref.attention.MultiHeadAttention, seed, dtype,
                 d_model=config["d_model"], n_heads=config["n_heads"], **kwargs)


@suite.case(3)
# RoPE's layout only shows with d_head > 2 (a single pair is the same in any layout) and T > 1: always
# try the smallest such case once (one head, so that other mistakes still shrink to their own witness).
@example(config={"d_model": 4, "n_heads": 1, "rope": True, "B": 1, "T": 2}, seed=0, dtype=torch.float64,
         masked=True)
@given(config=mha_configs(), seed=seeds, dtype=dtypes, masked=st.booleans())
def mha_matches_reference(student, config, seed, dtype, masked):
    """MultiHeadAttention with the reference's weights gives the reference's output and weights (with and without rope)"""  # noqa: E501
    mha, reference = _mha_twins(student, config, seed, dtype, rope=config["rope"])
    x, mask, bias = _mha_inputs(config, seed, dtype, masked)
    y, weights = mha(x, mask=mask, bias=bias, return_weights=True)
    expected_y, expected_weights = reference(x, mask=mask, bias=bias, return_weights=True)
    tol = TOLERANCES[dtype]._asdict()
    rope = " and RoPE on q and k only" if config["rope"] else ""
    expect_close(weights, expected_weights, "weights", **tol,
                 hint="head h uses features [h*d_head, (h+1)*d_head): view as (B, T, n_heads, d_head) "
                      f"then transpose(1, 2){rope}; mask and bias act on the scores, before the softmax")
    expect_close(y, expected_y, "y", **tol, hint="merge heads back to (B, T, d_model) before out_proj")


@suite.case(1)
@given(config=mha_configs(), seed=seeds)
def mha_gradients(student, config, seed):
    """MultiHeadAttention's gradients w.r.t. x and every parameter equal the reference's (float64)"""
    mha, reference = _mha_twins(student, config, seed, torch.float64, rope=config["rope"])
    x, mask, bias = _mha_inputs(config, seed, torch.float64, masked=True)
    grad_y = randn(seed + 2, *x.shape)
    _, grads, param_grads = mha.grad([x], {"mask": mask, "bias": bias}, grad_outputs=[grad_y], wrt=(0,))
    expected_inputs, expected_params = reference_grads(reference, [x], grad_y, mask=mask, bias=bias)
    expect_close(grads.get(0), expected_inputs[0], "d(y)/d(x)", **GRADIENT_TOLERANCE._asdict())
    for name, expected in expected_params.items():
        expect(param_grads.get(name) is not None, f"parameter {name} gets no gradient")
        expect_close(param_grads[name], expected, f"d(y)/d({name})", **GRADIENT_TOLERANCE._asdict())


@suite.case(1, max_examples=5)
@given(config=_dropout_configs, seed=seeds)
def mha_dropout(student, config, seed):
    """attention dropout: none in eval mode; in train mode it changes y but not the returned weights"""
    mha, reference = _mha_twins(student, config, seed, torch.float64, dropout=0.5)
    x = randn(seed, config["B"], config["T"], config["d_model"])
    expected_y, expected_weights = reference(x, return_weights=True)
    y, _ = mha(x, return_weights=True)
    tol = TOLERANCES[torch.float64]._asdict()
    expect_close(y, expected_y, "y in eval mode", **tol,
                 hint="dropout must be off in eval mode (use nn.Dropout)")
    mha.train()
    student.call("torch.manual_seed", seed)
    y, weights = mha(x, return_weights=True)
    expect_close(weights, expected_weights, "weights in train mode", **tol,
                 hint="return the weights from before dropout")
    expect(not torch.allclose(y, expected_y), "in train mode with dropout=0.5, y equals the eval-mode y: "
                                              "is self.dropout applied to the attention weights?")
