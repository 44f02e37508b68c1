"""attention.py: causal_mask, scaled_dot_product_attention (A1), MultiHeadAttention (20 points)."""
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ..reference import ref
from . import Suite
from .checks import expect, expect_close, expect_tensor, expect_value_error, shape_of
from .pairs import reference_grads, twins
from .strategies import attention_shapes, dtypes, mha_configs, randn, random_mask, seeds, small




suite = Suite("attention")
SDPA = "attention.scaled_dot_product_attention"


def _inputs(shape: dict, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    lead, n_q, n_k = shape["lead"], shape["n_q"], shape["n_k"]
    q = randn(seed, *lead, n_q, shape["d_k"], dtype=dtype)
    k = randn(seed + 1, *lead, n_k, shape["d_k"], dtype=dtype)
    v = randn(seed + 2, *lead, n_k, shape["d_v"], dtype=dtype)
    return q, k, v


@suite.case(1, public=True)
@given(n=st.integers(0, 9))
def causal_mask_values(student, n):
    """causal_mask(n) is a bool (n, n) tensor, True exactly where j <= i"""
    mask = expect_tensor(student.call("attention.causal_mask", n), (n, n), f"causal_mask({n})")
    expect(mask.dtype == torch.bool, f"causal_mask({n}) has dtype {mask.dtype}, expected torch.bool")
    for i in range(n):
        for j in range(n):
            expect(bool(mask[i, j]) == (j <= i),
                   f"causal_mask({n})[{i}, {j}] is {bool(mask[i, j])}, expected {j <= i} "
                   f"(True means query {i} may attend to key {j}: allowed iff j <= i)")


@suite.case(1, public=True)
@given(shape=attention_shapes(), seed=seeds, dtype=dtypes)
def sdpa_shapes_and_dtype(student, shape, seed, dtype):
    """scaled_dot_product_attention returns out (..., n_q, d_v) and weights (..., n_q, n_k) in the inputs' dtype"""
    q, k, v = _inputs(shape, seed, dtype)
    out, weights = student.call(SDPA, q, k, v)
    lead, n_q = shape["lead"], shape["n_q"]
    expect_tensor(out, (*lead, n_q, shape["d_v"]), "out")
    expect_tensor(weights, (*lead, n_q, shape["n_k"]), "weights")
    expect(out.dtype == dtype and weights.dtype == dtype,
           f"inputs are {dtype} but out is {out.dtype} and weights {weights.dtype}: compute in the inputs' dtype")


@suite.case(2, public=True)
@given(shape=attention_shapes(), seed=seeds)
def sdpa_rows_are_distributions(student, shape, seed):
    """weights are >= 0, zero at masked keys, and each row sums to 1 over the allowed keys"""
    q, k, v = _inputs(shape, seed, torch.float64)
    mask = random_mask(seed, shape["n_q"], shape["n_k"])
    _, weights = student.call(SDPA, q, k, v, mask=mask)
    expect_tensor(weights, (*shape["lead"], shape["n_q"], shape["n_k"]), "weights")
    expect(bool((weights >= 0).all()), "weights has negative entries: is the softmax applied?")
    leaked = weights.masked_fill(mask, 0).abs().max().item()
    expect(leaked < 1e-9, f"a masked key (mask False) gets weight {leaked:.3g}, expected 0 "
                          f"(mask True means ALLOWED); mask:\n{mask.int().tolist()}")
    sums = weights.sum(-1)
    worst = (sums - 1).abs().argmax().item()
    row = worst % shape["n_q"]
    expect(bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-6)),
           f"weights rows must sum to 1 over allowed keys; row {row} sums to "
           f"{sums.flatten()[worst].item():.4g} (softmax over the key axis, dim=-1?); mask:\n{mask.int().tolist()}")


@suite.case(2, public=True)
@given(n_q=small, n_k=small, d=small, seed=seeds)
def sdpa_fully_masked_rows(student, n_q, n_k, d, seed):
    """a query with no allowed key gets zero weights and a zero output, with finite gradients"""
    q, k, v = _inputs({"lead": (), "n_q": n_q, "n_k": n_k, "d_k": d, "d_v": d}, seed, torch.float64)
    mask = random_mask(seed, n_q, n_k)
    mask[0] = False  # query 0 sees nothing
    (out, weights), grads, _ = student.grad(SDPA, [q, k, v], {"mask": mask},
                                           grad_outputs=[torch.ones(n_q, d, dtype=torch.float64), None],
                                           wrt=(0, 1, 2))
    for name, value in (("out", out), ("weights", weights)):
        expect(bool(torch.isfinite(value).all()), f"{name} has NaN/inf for a fully masked query row "
                                                  "(softmax over only -inf is 0/0): give such rows zero weight")
    expect(weights[0].abs().max().item() < 1e-9 and out[0].abs().max().item() < 1e-9,
           f"fully masked query row 0: weights {weights[0].tolist()}, out {out[0].tolist()}; expected all zeros")
    for i, name in enumerate("qkv"):
        expect(grads.get(i) is not None and bool(torch.isfinite(grads[i]).all()),
               f"the gradient with respect to {name} is missing or not finite when a row is fully masked")


@suite.case(1, public=True)
@given(n=st.integers(2, 6), d=small, seed=seeds, t=st.integers(0, 4))
def sdpa_causal_no_future_leak(student, n, d, seed, t):
    """with the causal mask, changing token t's key and value leaves every output before t unchanged"""
    t = t % n
    q, k, v = _inputs({"lead": (), "n_q": n, "n_k": n, "d_k": d, "d_v": d}, seed, torch.float64)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    out, _ = student.call(SDPA, q, k, v, mask=mask)
    k2, v2 = k.clone(), v.clone()
    k2[t] += 3.0
    v2[t] -= 5.0
    out2, _ = student.call(SDPA, q, k2, v2, mask=mask)
    expect_tensor(out, (n, d), "out")
    changed = [i for i in range(t) if not torch.allclose(out[i], out2[i], atol=1e-9)]
    expect(not changed, f"changing token {t} changed the outputs of earlier queries {changed}: "
                        "the future leaks through the mask")


@suite.case(1, public=True)
@given(config=mha_configs(), seed=seeds)
def mha_contract(student, config, seed):
    """MultiHeadAttention has q/k/v/out_proj Linear(d_model, d_model), returns (B, T, d_model) and weights (B, H, T, T)"""
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]
    mha = student.call("attention.MultiHeadAttention", d_model, n_heads, rope=config["rope"])
    state = mha.state_dict()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        weight = state.get(f"{name}.weight")
        expect(weight is not None and tuple(weight.shape) == (d_model, d_model),
               f"{name}.weight should exist with shape {(d_model, d_model)}, got {shape_of(weight)}")
    x = randn(seed, B, T, d_model, dtype=torch.float32)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    y = mha(x, mask=mask)
    expect_tensor(y, (B, T, d_model), "forward(x)")
    y, weights = mha(x, mask=mask, return_weights=True)
    expect_tensor(weights, (B, n_heads, T, T), "weights")
    expect(bool(torch.allclose(weights.sum(-1), torch.ones(B, n_heads, T), atol=1e-5)),
           "each head's weight rows must sum to 1")


@suite.case(1, public=True)
@given(n_heads=st.integers(2, 5), extra=st.integers(0, 3))
def mha_value_errors(student, n_heads, extra):
    """MultiHeadAttention raises ValueError naming the argument for impossible configurations"""
    d_model = n_heads * 4 + 1 + extra % (n_heads - 1)
    expect_value_error(lambda: student.call("attention.MultiHeadAttention", d_model, n_heads),
                       f"MultiHeadAttention(d_model={d_model}, n_heads={n_heads})", ("d_model", "n_heads"))
    odd = n_heads * 3
    expect_value_error(lambda: student.call("attention.MultiHeadAttention", odd, n_heads, rope=True),
                       f"MultiHeadAttention(d_model={odd}, n_heads={n_heads}, rope=True) (d_head=3 is odd)",
                       ("d_head", "rope", "even"))


def _sdpa_variants(q, k, v, mask, bias) -> dict[str, torch.Tensor]:
    """What classic mistakes return, for the feedback (computed here, never shown)."""
    d = q.size(-1)

    def attend(scores, axis=-1, m=mask):
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
        "the softmax runs over the query axis (dim=-2) instead of the keys": attend(raw / math.sqrt(d), axis=-2),
    }
    if mask is not None:
        variants["the mask is ignored"] = attend(raw / math.sqrt(d), m=None)
        variants["the mask is read the other way round (True must mean allowed)"] = attend(raw / math.sqrt(d), m=~mask)
    return variants


@suite.case(4)
@given(shape=attention_shapes(), seed=seeds, dtype=dtypes, masked=st.booleans(), biased=st.booleans())
def sdpa_matches_reference(student, shape, seed, dtype, masked, biased):
    """scaled_dot_product_attention matches (A1) on random q, k, v, masks and biases"""
    q, k, v = _inputs(shape, seed, dtype)
    mask = random_mask(seed + 3, shape["n_q"], shape["n_k"]) if masked else None
    bias = randn(seed + 4, shape["n_q"], shape["n_k"], dtype=dtype) if biased else None
    out, weights = student.call(SDPA, q, k, v, mask=mask, bias=bias)
    expected_out, expected_weights = ref.attention.scaled_dot_product_attention(q, k, v, mask, bias)
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    expect_close(out, expected_out, "out", **tol, hint="out should be weights @ v",
                 diagnoses=lambda: _sdpa_variants(q, k, v, mask, bias))
    expect_close(weights, expected_weights, "weights", **tol,
                 hint="is it softmax(q k^T / sqrt(d_k) + bias) over the keys, with masked keys at 0?")


@suite.case(2)
@given(shape=attention_shapes(), seed=seeds, masked=st.booleans())
def sdpa_gradients(student, shape, seed, masked):
    """gradients of scaled_dot_product_attention w.r.t. q, k, v and bias equal the reference's (float64)"""
    q, k, v = _inputs(shape, seed, torch.float64)
    bias = randn(seed + 4, shape["n_q"], shape["n_k"])
    mask = random_mask(seed + 3, shape["n_q"], shape["n_k"]) if masked else None
    grad_out = randn(seed + 5, *shape["lead"], shape["n_q"], shape["d_v"])
    _, grads, _ = student.grad(SDPA, [q, k, v, mask, bias], grad_outputs=[grad_out, None], wrt=(0, 1, 2, 4))
    inputs = [t.clone().requires_grad_(True) for t in (q, k, v, bias)]
    out, _ = ref.attention.scaled_dot_product_attention(inputs[0], inputs[1], inputs[2], mask, inputs[3])
    out.backward(grad_out)
    for index, name, x in zip((0, 1, 2, 4), ("q", "k", "v", "bias"), inputs):
        expect(grads.get(index) is not None, f"no gradient reaches {name}: is the graph cut (.detach(), .item(), numpy)?")
        expect_close(grads[index], x.grad, f"d(out)/d({name})", atol=1e-8, rtol=1e-6)


def _mha_inputs(config: dict, seed: int, dtype: torch.dtype, masked: bool) -> tuple:
    B, T, H = config["B"], config["T"], config["n_heads"]
    x = randn(seed, B, T, config["d_model"], dtype=dtype)
    mask = torch.ones(T, T, dtype=torch.bool).tril() if masked else None
    bias = randn(seed + 1, H, T, T, dtype=dtype)
    return x, mask, bias


def _mha_twins(student, config: dict, seed: int, dtype: torch.dtype):
    return twins(student, "attention.MultiHeadAttention", ref.attention.MultiHeadAttention, seed, dtype,
                 d_model=config["d_model"], n_heads=config["n_heads"], rope=config["rope"])


@suite.case(3)
@given(config=mha_configs(), seed=seeds, dtype=dtypes, masked=st.booleans())
def mha_matches_reference(student, config, seed, dtype, masked):
    """MultiHeadAttention with the reference's weights gives the reference's output and weights (with and without rope)"""
    mha, reference = _mha_twins(student, config, seed, dtype)
    x, mask, bias = _mha_inputs(config, seed, dtype, masked)
    y, weights = mha(x, mask=mask, bias=bias, return_weights=True)
    expected_y, expected_weights = reference(x, mask=mask, bias=bias, return_weights=True)
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    rope = " and RoPE on q and k only" if config["rope"] else ""
    expect_close(weights, expected_weights, "weights", **tol,
                 hint="head h uses features [h*d_head, (h+1)*d_head): view as (B, T, n_heads, d_head) "
                      f"then transpose(1, 2){rope}; mask and bias act on the scores, before the softmax")
    expect_close(y, expected_y, "y", **tol, hint="merge heads back to (B, T, d_model) before out_proj")


@suite.case(1)
@given(config=mha_configs(), seed=seeds)
def mha_gradients(student, config, seed):
    """MultiHeadAttention's gradients w.r.t. x and every parameter equal the reference's (float64)"""
    mha, reference = _mha_twins(student, config, seed, torch.float64)
    x, mask, bias = _mha_inputs(config, seed, torch.float64, masked=True)
    grad_y = randn(seed + 2, *x.shape)
    _, grads, param_grads = mha.grad([x], {"mask": mask, "bias": bias}, grad_outputs=[grad_y], wrt=(0,))
    expected_inputs, expected_params = reference_grads(reference, [x], grad_y, mask=mask, bias=bias)
    expect_close(grads.get(0), expected_inputs[0], "d(y)/d(x)", atol=1e-8, rtol=1e-6)
    for name, expected in expected_params.items():
        expect(param_grads.get(name) is not None, f"parameter {name} gets no gradient")
        expect_close(param_grads[name], expected, f"d(y)/d({name})", atol=1e-8, rtol=1e-6)


@suite.case(1)
@settings(max_examples=5)
@given(config=mha_configs(rope=False), seed=seeds)
def mha_dropout(student, config, seed):
    """attention dropout: none in eval mode; in train mode it changes y but not the returned weights"""
    config = {**config, "T": max(config["T"], 3)}
    torch.manual_seed(seed)
    reference = ref.attention.MultiHeadAttention(config["d_model"], config["n_heads"], dropout=0.5).double().eval()
    mha = student.call("attention.MultiHeadAttention", config["d_model"], config["n_heads"], dropout=0.5)
    mha.load_state_dict(reference.state_dict())
    mha.to(torch.float64).eval()
    x, mask, _ = _mha_inputs(config, seed, torch.float64, masked=False)
    expected_y, expected_weights = reference(x, return_weights=True)
    y, _ = mha(x, return_weights=True)
    expect_close(y, expected_y, "y in eval mode", hint="dropout must be off in eval mode (use nn.Dropout)")
    mha.train()
    student.call("torch.manual_seed", seed)
    y, weights = mha(x, return_weights=True)
    expect_close(weights, expected_weights, "weights in train mode",
                 hint="return the weights from before dropout")
    expect(not torch.allclose(y, expected_y), "in train mode with dropout=0.5, y equals the eval-mode y: "
                                              "is self.dropout applied to the attention weights?")
