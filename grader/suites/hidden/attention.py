"""attention.py, hidden cases: scaled_dot_product_attention (A1) and MultiHeadAttention
against the reference (values, gradients, dropout), naming classic mistakes."""
import math
from functools import cache

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from ...spec import TOLERANCES, Visibility
from .. import Suite
from ..checks import close, expect, expect_close, expect_grad_close, expect_tensor
from ..public.attention import MHA, SDPA, qkv
from ..strategies import attention_shapes, causal, dtypes, mha_configs, randn, random_mask, seeds
from ..twins import moves_input, moves_parameter, reference_grads, student_twin, twins
from .reference import ref

suite = Suite("attention", Visibility.HIDDEN)

# At least 3 positions, so that dropout has enough attention weights to change y visibly.
_dropout_configs = mha_configs(rope=False).map(lambda config: {**config, "T": max(config["T"], 3)})


def _sdpa_variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   bias: torch.Tensor | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What classic mistakes return, (out, weights), for the feedback (computed here, never shown)."""
    d = q.size(-1)

    def attend(scores: torch.Tensor, axis: int = -1, m: torch.Tensor | None = mask,
               b: torch.Tensor | None = bias) -> tuple[torch.Tensor, torch.Tensor]:
        if b is not None:
            scores = scores + b
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        w = torch.softmax(scores, dim=axis).nan_to_num(0.0)
        return w @ v, w

    raw = q @ k.transpose(-2, -1)
    scaled = raw / math.sqrt(d)
    variants = {
        "the scores are not divided by sqrt(d_k)": attend(raw),
        "the scores are divided by d_k instead of sqrt(d_k)": attend(raw / d),
        "the softmax runs over the query axis (dim=-2) instead of the keys": attend(scaled, axis=-2),
    }
    if mask is not None:
        variants["the mask is ignored"] = attend(scaled, m=None)
        variants["the mask is read the other way round (True must mean allowed)"] = attend(scaled, m=~mask)
    if bias is not None:
        variants["the bias is ignored"] = attend(scaled, b=None)
        after = attend(scaled, b=None)[1] + bias
        variants["the bias is added to the weights after the softmax instead of to the scores"] = (after @ v,
                                                                                                  after)
    return variants


@suite.case(2, float64=True)
@given(shape=attention_shapes(), seed=seeds, dtype=dtypes, masked=st.booleans(), biased=st.booleans())
def sdpa_matches_reference(student, shape, seed, dtype, masked, biased):
    """scaled_dot_product_attention matches (A1) on random q, k, v, masks and biases"""
    q, k, v = qkv(shape, seed, dtype)
    mask = random_mask(seed + 3, shape["n_q"], shape["n_k"]) if masked else None
    bias = randn(seed + 4, shape["n_q"], shape["n_k"], dtype=dtype) if biased else None
    out, weights = student.call(SDPA, q, k, v, mask=mask, bias=bias)
    expected_out, expected_weights = ref.attention.scaled_dot_product_attention(q, k, v, mask, bias)
    tol = TOLERANCES[dtype]._asdict()
    # the weights first: when they are wrong, so is out, and only the weights say why
    expect_close(weights, expected_weights, "weights", **tol,
                 hint="(A1): softmax(q k^T / sqrt(d_k) + bias) over the keys, with masked keys at 0",
                 diagnoses=lambda: {s: w for s, (_, w) in _sdpa_variants(q, k, v, mask, bias).items()})
    expect_close(out, expected_out, "out", **tol, hint="the weights match: out should be weights @ v")


@suite.case(1, float64=True)
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
    args = [q, k, v, mask, bias]
    for index, name, x in zip((0, 1, 2, 4), ("q", "k", "v", "bias"), inputs, strict=True):
        expect_grad_close(grads.get(index), x.grad, f"d(out)/d({name})",
                          moves=moves_input(lambda a: student.call(SDPA, *a), args, index))


def _mha_inputs(config: dict, seed: int, dtype: torch.dtype, masked: bool) -> tuple:
    B, T, H = config["B"], config["T"], config["n_heads"]
    x = randn(seed, B, T, config["d_model"], dtype=dtype)
    mask = causal(T) if masked else None
    bias = randn(seed + 1, H, T, T, dtype=dtype)
    return x, mask, bias


def _mha_twins(student, config: dict, seed: int, dtype: torch.dtype, **kwargs) -> tuple:
    return twins(student, MHA, ref.attention.MultiHeadAttention, seed, dtype,
                 d_model=config["d_model"], n_heads=config["n_heads"], **kwargs)


def _mha_variants(reference: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                  bias: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What a MultiHeadAttention (rope=False) with one classic mistake returns, (y, weights),
    with the reference's weights (computed here, never shown)."""
    B, T, d_model = x.shape
    H = reference.n_heads
    d_head = d_model // H
    sdpa = ref.attention.scaled_dot_product_attention

    def run(*, split_view: bool = False, scale: float = 1.0, m: torch.Tensor | None = mask,
            b: torch.Tensor | None = bias, bias_after: bool = False, merge_view: bool = False,
            out_proj: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(B, H, T, d_head) if split_view else t.unflatten(-1, (H, d_head)).transpose(1, 2)

        q, k, v = (split(p(x)) for p in (reference.q_proj, reference.k_proj, reference.v_proj))
        _, weights = sdpa(q * scale, k, v, m, None if bias_after else b)
        if bias_after:
            weights = weights + b
        heads = weights @ v
        merged = heads.reshape(B, T, d_model) if merge_view else heads.transpose(1, 2).reshape(B, T, d_model)
        return (reference.out_proj(merged) if out_proj else merged), weights

    with torch.no_grad():
        variants = {
            "the heads are split with .view(B, n_heads, T, d_head) straight from (B, T, d_model) (view as "
            "(B, T, n_heads, d_head), then transpose(1, 2))": run(split_view=True),
            "the scores are divided by sqrt(d_model) instead of sqrt(d_head)":
                run(scale=math.sqrt(d_head / d_model)),
            "the scores are not divided by sqrt(d_head)": run(scale=math.sqrt(d_head)),
            "the bias is ignored": run(b=None),
            "the bias is added to the weights after the softmax instead of to the scores":
                run(bias_after=True),
            "the heads are merged with .reshape(B, T, d_model) straight from (B, n_heads, T, d_head) "
            "(transpose(1, 2) back first)": run(merge_view=True),
            "out_proj is not applied to the merged heads": run(out_proj=False),
        }
        if mask is not None:
            variants["the mask is ignored"] = run(m=None)
            variants["the mask is read the other way round (True must mean allowed)"] = run(m=~mask)
    return variants


@suite.case(1, float64=True)
# Without rope: the reference would rotate with its own apply_rope, so a positional bug would cost
# attention points; the public mha_rope_heads checks rope=True with the student's own apply_rope.
@given(config=mha_configs(rope=False), seed=seeds, dtype=dtypes, masked=st.booleans())
def mha_matches_reference(student, config, seed, dtype, masked):
    """MultiHeadAttention with the reference's weights gives the reference's output and weights"""
    mha, reference = _mha_twins(student, config, seed, dtype)
    x, mask, bias = _mha_inputs(config, seed, dtype, masked)
    y, weights = mha(x, mask=mask, bias=bias, return_weights=True)
    expected_y, expected_weights = reference(x, mask=mask, bias=bias, return_weights=True)
    tol = TOLERANCES[dtype]._asdict()
    variants = cache(lambda: _mha_variants(reference, x, mask, bias))  # only on a miss
    expect_close(weights, expected_weights, "weights", **tol,
                 diagnoses=lambda: {sentence: w for sentence, (_, w) in variants().items()},
                 hint="head h: softmax(q_h k_h^T / sqrt(d_head) + bias) over the keys, masked keys at 0, "
                      "with q_h, k_h the features [h*d_head, (h+1)*d_head) of q_proj(x), k_proj(x)")
    expect_close(y, expected_y, "y", **tol,
                 diagnoses=lambda: {sentence: out for sentence, (out, _) in variants().items()},
                 hint="the weights match: y = out_proj(the heads' weights @ v_h, head h at features "
                      "[h*d_head, (h+1)*d_head))")


@suite.case(1, float64=True)
@given(config=mha_configs(rope=False), seed=seeds)  # rope=False: as in mha_matches_reference
def mha_gradients(student, config, seed):
    """MultiHeadAttention's gradients w.r.t. x and every parameter equal the reference's (float64)"""
    mha, reference = _mha_twins(student, config, seed, torch.float64)
    x, mask, bias = _mha_inputs(config, seed, torch.float64, masked=True)
    grad_y = randn(seed + 2, *x.shape)
    _, grads, param_grads = mha.grad([x], {"mask": mask, "bias": bias}, grad_outputs=[grad_y], wrt=(0,))
    expected_inputs, expected_params = reference_grads(reference, [x], grad_y, mask=mask, bias=bias)
    kwargs = {"mask": mask, "bias": bias}
    expect_grad_close(grads.get(0), expected_inputs[0], "d(y)/d(x)",
                      moves=moves_input(lambda a: mha(*a, **kwargs), [x], 0))
    for name, expected in expected_params.items():
        expect_grad_close(param_grads.get(name), expected, f"d(y)/d({name})",
                          moves=moves_parameter(mha, [x], kwargs, name))


def _weights_after_dropout(weights: torch.Tensor, expected: torch.Tensor, p: float) -> bool:
    """Every entry is 0 or expected / (1 - p), some of each: dropout applied to the returned weights."""
    kept = (weights - expected / (1 - p)).abs() <= 1e-9
    dropped = (weights == 0) & (expected != 0)
    return bool((kept | dropped).all() and dropped.any())


@suite.case(0.5, max_examples=5, float64=True)
@given(config=_dropout_configs, seed=seeds)
def mha_dropout(student, config, seed):
    """attention dropout: none in eval mode; in train mode it changes y but not the returned weights"""
    p = 0.5
    mha, reference = _mha_twins(student, config, seed, torch.float64, dropout=p)
    x = randn(seed, config["B"], config["T"], config["d_model"])
    expected_y, expected_weights = reference(x, return_weights=True)
    y, _ = mha(x, return_weights=True)
    expect_tensor(y, expected_y.shape, "y in eval mode")
    tol = TOLERANCES[torch.float64]._asdict()
    if not close(y, expected_y, **tol):  # dropout's fault only if the same module without dropout is right
        plain = student_twin(student, MHA, reference, torch.float64, d_model=config["d_model"],
                             n_heads=config["n_heads"], dropout=0.0)
        hint = ("with dropout=0.0 your module gives the expected y: dropout must be off in eval mode "
                "(use nn.Dropout)" if close(plain(x), expected_y, **tol)
                else "it differs with dropout=0.0 too: the mistake is not dropout's (mha_matches_reference "
                     "says more)")
        expect_close(y, expected_y, f"y in eval mode with dropout={p}", **tol, hint=hint)
    mha.train()
    student.manual_seed(seed)
    y, weights = mha(x, return_weights=True)
    expect_tensor(weights, expected_weights.shape, "weights in train mode")
    expect(not _weights_after_dropout(weights, expected_weights, p),
           f"in train mode with dropout={p} the returned weights are zeroed or scaled by 1/(1-p): dropout is "
           "applied to them; return the weights from before dropout")
    expect_close(weights, expected_weights, "weights in train mode", **tol,
                 hint="in train mode the returned weights are the eval-mode ones (dropout acts only on the "
                      "weights that multiply v)")
    expect(not torch.allclose(y, expected_y), f"in train mode with dropout={p}, y equals the eval-mode y: "
                                              "is self.dropout applied to the attention weights?")
