"""attention.py, public cases (9 points): causal_mask, scaled_dot_product_attention (A1) and
MultiHeadAttention's contract, checked on the student's own outputs without the reference."""
import torch
from hypothesis import given
from hypothesis import strategies as st

from ...spec import Visibility
from .. import Suite
from ..checks import expect, expect_tensor, expect_value_error, shape_of
from ..strategies import attention_shapes, causal, dtypes, mha_configs, randn, random_mask, seeds, small

suite = Suite("attention", Visibility.PUBLIC)
SDPA = "attention.scaled_dot_product_attention"
MHA = "attention.MultiHeadAttention"


def qkv(shape: dict, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v for an attention_shapes() draw."""
    lead, n_q, n_k = shape["lead"], shape["n_q"], shape["n_k"]
    q = randn(seed, *lead, n_q, shape["d_k"], dtype=dtype)
    k = randn(seed + 1, *lead, n_k, shape["d_k"], dtype=dtype)
    v = randn(seed + 2, *lead, n_k, shape["d_v"], dtype=dtype)
    return q, k, v


@st.composite
def _length_and_token(draw: st.DrawFn) -> tuple[int, int]:
    """A sequence length n >= 2 and a token t < n."""
    n = draw(st.integers(2, 6))
    return n, draw(st.integers(0, n - 1))


@suite.case(1)
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


@suite.case(1)
@given(shape=attention_shapes(), seed=seeds, dtype=dtypes)
def sdpa_shapes_and_dtype(student, shape, seed, dtype):
    """scaled_dot_product_attention returns out (..., n_q, d_v) and weights (..., n_q, n_k) in the inputs' dtype"""  # noqa: E501
    q, k, v = qkv(shape, seed, dtype)
    out, weights = student.call(SDPA, q, k, v)
    lead, n_q = shape["lead"], shape["n_q"]
    expect_tensor(out, (*lead, n_q, shape["d_v"]), "out")
    expect_tensor(weights, (*lead, n_q, shape["n_k"]), "weights")
    expect(out.dtype == dtype and weights.dtype == dtype,
           f"inputs are {dtype} but out is {out.dtype} and weights {weights.dtype}: compute in the inputs' "
           "dtype")


@suite.case(2)
@given(shape=attention_shapes(), seed=seeds)
def sdpa_rows_are_distributions(student, shape, seed):
    """weights are >= 0, zero at masked keys, and each row sums to 1 over the allowed keys"""
    q, k, v = qkv(shape, seed, torch.float64)
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
           f"{sums.flatten()[worst].item():.4g} (softmax over the key axis, dim=-1?); "
           f"mask:\n{mask.int().tolist()}")


@suite.case(2)
@given(n_q=small, n_k=small, d=small, seed=seeds)
def sdpa_fully_masked_rows(student, n_q, n_k, d, seed):
    """a query with no allowed key gets zero weights and a zero output, with finite gradients"""
    q, k, v = qkv({"lead": (), "n_q": n_q, "n_k": n_k, "d_k": d, "d_v": d}, seed, torch.float64)
    mask = random_mask(seed, n_q, n_k)
    mask[0] = False  # query 0 sees nothing
    (out, weights), grads, _ = student.grad(SDPA, [q, k, v], {"mask": mask},
                                           grad_outputs=[torch.ones(n_q, d, dtype=torch.float64), None],
                                           wrt=(0, 1, 2))
    for name, value in (("out", out), ("weights", weights)):
        expect(bool(torch.isfinite(value).all()),
               f"{name} has NaN/inf for a fully masked query row (softmax over only -inf is 0/0): give such "
               "rows zero weight")
    expect(weights[0].abs().max().item() < 1e-9 and out[0].abs().max().item() < 1e-9,
           f"fully masked query row 0: weights {weights[0].tolist()}, out {out[0].tolist()}; expected all "
           "zeros")
    for i, name in enumerate("qkv"):
        expect(grads.get(i) is not None and bool(torch.isfinite(grads[i]).all()),
               f"the gradient with respect to {name} is missing or not finite when a row is fully masked")


@suite.case(1)
@given(n_and_t=_length_and_token(), d=small, seed=seeds)
def sdpa_causal_no_future_leak(student, n_and_t, d, seed):
    """with the causal mask, changing token t's key and value leaves every output before t unchanged"""
    n, t = n_and_t
    q, k, v = qkv({"lead": (), "n_q": n, "n_k": n, "d_k": d, "d_v": d}, seed, torch.float64)
    mask = causal(n)
    out, _ = student.call(SDPA, q, k, v, mask=mask)
    k2, v2 = k.clone(), v.clone()
    k2[t] += 3.0
    v2[t] -= 5.0
    out2, _ = student.call(SDPA, q, k2, v2, mask=mask)
    expect_tensor(out, (n, d), "out")
    changed = [i for i in range(t) if not torch.allclose(out[i], out2[i], atol=1e-9)]
    expect(not changed, f"changing token {t} changed the outputs of earlier queries {changed}: "
                        "the future leaks through the mask")


@suite.case(1)
@given(config=mha_configs(), seed=seeds)
def mha_contract(student, config, seed):
    """MultiHeadAttention has q/k/v/out_proj Linear(d_model, d_model), returns (B, T, d_model) and weights (B, H, T, T)"""  # noqa: E501
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]
    mha = student.call(MHA, d_model, n_heads, rope=config["rope"])
    state = mha.state_dict()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        weight = state.get(f"{name}.weight")
        expect(weight is not None and tuple(weight.shape) == (d_model, d_model),
               f"{name}.weight should exist with shape {(d_model, d_model)}, got {shape_of(weight)}")
    x = randn(seed, B, T, d_model, dtype=torch.float32)
    mask = causal(T)
    y = mha(x, mask=mask)
    expect_tensor(y, (B, T, d_model), "forward(x)")
    y, weights = mha(x, mask=mask, return_weights=True)
    expect_tensor(weights, (B, n_heads, T, T), "weights")
    expect(bool(torch.allclose(weights.sum(-1), torch.ones(B, n_heads, T), atol=1e-5)),
           "each head's weight rows must sum to 1")


@suite.case(1)
@given(n_heads=st.integers(2, 5), extra=st.integers(0, 3))
def mha_value_errors(student, n_heads, extra):
    """MultiHeadAttention raises ValueError naming the argument for impossible configurations"""
    d_model = n_heads * 4 + 1 + extra % (n_heads - 1)
    expect_value_error(lambda: student.call(MHA, d_model, n_heads),
                       f"MultiHeadAttention(d_model={d_model}, n_heads={n_heads})", ("d_model", "n_heads"))
    odd = n_heads * 3
    expect_value_error(lambda: student.call(MHA, odd, n_heads, rope=True),
                       f"MultiHeadAttention(d_model={odd}, n_heads={n_heads}, rope=True) (d_head=3 is odd)",
                       ("d_head", "rope", "even"))
