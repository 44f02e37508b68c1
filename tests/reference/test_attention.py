"""attention.py: causal_mask, scaled_dot_product_attention (A1) and MultiHeadAttention,
checked against torch's own implementations with the same inputs and weights."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from grader.suites.strategies import randn, random_mask
from helpers import (
    additive_mask,
    assert_close,
    batch_shapes,
    build,
    head_shapes,
    lengths,
    seeds,
    sizes,
    torch_attn_mask,
)
from solutions.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from solutions.positional import apply_rope


@st.composite
def attention_inputs(draw: st.DrawFn, dtype: torch.dtype = torch.float64) -> dict:
    """q, k, v with broadcasting leading dims, an optional mask and an optional float bias."""
    q_batch = draw(batch_shapes)
    # k and v may carry size-1 leading dims that broadcast against q's.
    kv_batch = tuple(draw(st.sampled_from([1, n])) for n in q_batch)
    n_q, n_k, d_k, d_v, seed = draw(sizes), draw(sizes), draw(sizes), draw(sizes), draw(seeds)
    mask_batch = draw(st.sampled_from([(), q_batch]))
    return {
        "q": randn(seed, *q_batch, n_q, d_k, dtype=dtype),
        "k": randn(seed + 1, *kv_batch, n_k, d_k, dtype=dtype),
        "v": randn(seed + 2, *kv_batch, n_k, d_v, dtype=dtype),
        "mask": draw(st.sampled_from([None, random_mask(seed, *mask_batch, n_q, n_k)])),
        "bias": draw(st.sampled_from([None, randn(seed + 3, n_q, n_k, dtype=dtype)])),
    }


def torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               bias: torch.Tensor | None) -> torch.Tensor:
    """torch's attention with our mask (True = allowed) and bias folded into one attn_mask."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask(mask, bias, q.dtype))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_causal_mask_allows_exactly_j_le_i(n: int) -> None:
    mask = causal_mask(n)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert mask.dtype == torch.bool
    assert torch.equal(mask, j <= i)


@given(inputs=attention_inputs())
def test_sdpa_matches_torch(inputs: dict) -> None:
    out, weights = scaled_dot_product_attention(**inputs)
    assert_close(out, torch_sdpa(**inputs))
    # With v = identity, torch's output is its attention weights.
    n_k = inputs["k"].size(-2)
    identity = torch.eye(n_k, dtype=torch.float64)
    assert_close(weights, torch_sdpa(inputs["q"], inputs["k"], identity, inputs["mask"], inputs["bias"]))


@given(inputs=attention_inputs(dtype=torch.float32))
def test_sdpa_float32_matches_torch_and_keeps_dtype(inputs: dict) -> None:
    out, weights = scaled_dot_product_attention(**inputs)
    assert out.dtype == weights.dtype == torch.float32
    assert_close(out, torch_sdpa(**inputs))


def test_sdpa_scales_by_sqrt_d_k_and_softmaxes_over_keys() -> None:
    """A hand-checked case: scores [[0, 2]] / sqrt(4) -> weights softmax([0, 1])."""
    q = torch.tensor([[1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    k = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(torch.tensor([[0.0, 1.0]], dtype=torch.float64), dim=-1)
    assert_close(weights, expected)
    assert_close(out, expected[:, :1])


@pytest.mark.parametrize("blocked_by", ["mask", "bias"])
def test_sdpa_row_with_no_allowed_key_is_zero_with_finite_grads(blocked_by: str, dtype: torch.dtype) -> None:
    q, k, v = (randn(s, 2, 3, 4, dtype=dtype).requires_grad_() for s in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool)
    bias = torch.zeros(3, 3, dtype=dtype)
    if blocked_by == "mask":
        mask[1] = False
    else:
        bias[1] = float("-inf")
    bias.requires_grad_(True)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)
    assert torch.equal(weights[:, 1], torch.zeros_like(weights[:, 1]))
    assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1]))
    assert_close(weights[:, [0, 2]].sum(-1), torch.ones(2, 2, dtype=dtype))
    (out.sum() + weights.square().sum()).backward()
    for tensor in (q, k, v, bias):
        assert torch.isfinite(tensor.grad).all()


@settings(max_examples=6)
@given(inputs=attention_inputs())
def test_sdpa_gradcheck(inputs: dict) -> None:
    for name in ("q", "k", "v", "bias"):
        if inputs[name] is not None:
            inputs[name].requires_grad_(True)
    mask = inputs.pop("mask")
    def attention(q, k, v, bias):
        return scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)

    assert torch.autograd.gradcheck(attention, tuple(inputs.values()))


def torch_mha(mha: MultiHeadAttention, n_heads: int, bias: bool) -> nn.MultiheadAttention:
    """nn.MultiheadAttention holding mha's weights (q, k, v packed as in_proj_weight [3E, E])."""
    d_model = mha.q_proj.in_features
    dtype = mha.q_proj.weight.dtype
    ref = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=dtype)
    projections = (mha.q_proj, mha.k_proj, mha.v_proj)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
            ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


@st.composite
def mha_inputs(draw: st.DrawFn, even_head: bool = False) -> dict:
    """A batch for multi-head attention with a causal, random or no mask and an optional bias."""
    (d_model, n_heads), B, T = draw(head_shapes(even_head)), draw(sizes), draw(lengths)
    seed = draw(seeds)
    masks = {"none": None, "causal": causal_mask(T), "random": random_mask(seed, B, n_heads, T, T)}
    return {
        "d_model": d_model, "n_heads": n_heads, "seed": seed,
        "x": randn(seed, B, T, d_model),
        "mask": masks[draw(st.sampled_from(sorted(masks)))],
        "bias": draw(st.sampled_from([None, randn(seed + 1, n_heads, T, T)])),
    }


@given(inputs=mha_inputs(), use_bias=st.booleans())
def test_mha_matches_torch_multihead_attention(inputs: dict, use_bias: bool) -> None:
    n_heads, x, mask, bias = inputs["n_heads"], inputs["x"], inputs["mask"], inputs["bias"]
    mha = build(MultiHeadAttention, inputs["d_model"], n_heads, bias=use_bias, seed=inputs["seed"])
    y, weights = mha(x, mask=mask, bias=bias, return_weights=True)
    ref = torch_mha(mha, n_heads, use_bias)
    y_ref, weights_ref = ref(x, x, x, attn_mask=torch_attn_mask(mask, bias, x.size(0), n_heads),
                             need_weights=True, average_attn_weights=False)
    assert_close(y, y_ref)
    assert_close(weights, weights_ref)
    assert_close(mha(x, mask=mask, bias=bias), y)


def test_mha_float32_matches_torch() -> None:
    x = randn(0, 2, 5, 8, dtype=torch.float32)
    mha = build(MultiHeadAttention, 8, 2, dtype=torch.float32)
    y = mha(x, mask=causal_mask(5))
    assert y.dtype == torch.float32
    y_ref, _ = torch_mha(mha, 2, True)(x, x, x, attn_mask=~causal_mask(5))
    assert_close(y, y_ref)


@given(inputs=mha_inputs(even_head=True), base=st.sampled_from([100.0, 10000.0]))
def test_mha_rope_rotates_queries_and_keys_of_each_head(inputs: dict, base: float) -> None:
    n_heads, x, mask, bias = inputs["n_heads"], inputs["x"], inputs["mask"], inputs["bias"]
    d_model = inputs["d_model"]
    mha = build(MultiHeadAttention, d_model, n_heads, rope=True, rope_base=base, seed=inputs["seed"])
    B, T, _ = x.shape

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(B, T, n_heads, d_model // n_heads).transpose(1, 2)

    q = apply_rope(heads(mha.q_proj(x)), base=base)
    k = apply_rope(heads(mha.k_proj(x)), base=base)
    out = torch_sdpa(q, k, heads(mha.v_proj(x)), mask, bias)
    expected = mha.out_proj(out.transpose(1, 2).reshape(B, T, d_model))
    assert_close(mha(x, mask=mask, bias=bias), expected)


def test_mha_gradcheck_through_rope_mask_and_bias() -> None:
    mha = build(MultiHeadAttention, 4, 2, rope=True)
    x, bias = randn(0, 2, 3, 4).requires_grad_(), randn(1, 2, 3, 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, bias: mha(x, mask=causal_mask(3), bias=bias), (x, bias))


def test_mha_weights_are_taken_before_dropout() -> None:
    x = randn(0, 2, 4, 8)
    mha = build(MultiHeadAttention, 8, 2, dropout=0.5).train()
    _, weights = mha(x, mask=causal_mask(4), return_weights=True)
    assert isinstance(mha.dropout, nn.Dropout) and mha.dropout.p == 0.5
    assert_close(weights, mha.eval()(x, mask=causal_mask(4), return_weights=True)[1])


def test_mha_dropout_acts_on_the_attention_weights() -> None:
    """With one token each head's only weight is 1, so dropout on the weights keeps a head's
    whole value vector (times 1 / (1 - p)) or zeroes all of it; never single features."""
    mha = build(MultiHeadAttention, 8, 2, dropout=0.5).train()
    with torch.no_grad():
        mha.out_proj.weight.copy_(torch.eye(8))
        mha.out_proj.bias.zero_()
    x = randn(0, 64, 1, 8)
    heads, values = mha(x).view(64, 2, 4), mha.v_proj(x).view(64, 2, 4)
    kept = heads.abs().sum(-1) > 0
    assert kept.any() and not kept.all()
    assert_close(heads[kept], 2 * values[kept])
    assert torch.equal(heads[~kept], torch.zeros_like(heads[~kept]))


@pytest.mark.parametrize("bias", [True, False])
def test_mha_submodules_are_the_four_projections(bias: bool) -> None:
    mha = MultiHeadAttention(12, 3, bias=bias)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        layer = getattr(mha, name)
        assert isinstance(layer, nn.Linear)
        assert (layer.in_features, layer.out_features) == (12, 12)
        assert (layer.bias is not None) == bias


@pytest.mark.parametrize("kwargs, names", [
    ({"d_model": 10, "n_heads": 4}, "d_model|n_heads"),
    ({"d_model": 12, "n_heads": 4, "rope": True}, "d_head|rope|d_model|n_heads"),
], ids=["indivisible", "odd_rope_head"])
def test_mha_rejects_impossible_shapes_naming_the_argument(kwargs: dict, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        MultiHeadAttention(**kwargs)
