"""attention.py, public cases: causal_mask, scaled_dot_product_attention (A1) and
MultiHeadAttention's contract, checked on the student's own outputs without the reference.

A1's values are computed here from its definition, with plain torch, on small inputs. The heads
of MultiHeadAttention are checked against the student's own projections (read from its
state_dict), its own apply_rope and either A1's definition or its own
scaled_dot_product_attention: a head that delegates to a wrong scaled_dot_product_attention is
that function's mistake, charged by the sdpa cases, not twice.
"""
import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st

from ...spec import EXACT, TOLERANCES, Visibility
from ...student import Remote, Student
from .. import Suite
from ..checks import (
    DROPOUT_OFF_IN_EVAL,
    Failed,
    close,
    expect,
    expect_close,
    expect_dropout,
    expect_tensor,
    expect_value_error,
    shape_of,
)
from ..strategies import attention_shapes, causal, dtypes, mha_configs, randn, random_mask, seeds, small

suite = Suite("attention", Visibility.PUBLIC)
SDPA = "attention.scaled_dot_product_attention"
MHA = "attention.MultiHeadAttention"
ROPE = "positional.apply_rope"
A1 = ("(A1): scores = q kᵀ / sqrt(d_k) + bias, weight 0 where mask is False, softmax over the key axis, "
      "out = weights v")


def qkv(shape: dict, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v for an attention_shapes() draw."""
    lead, n_q, n_k = shape["lead"], shape["n_q"], shape["n_k"]
    q = randn(seed, *lead, n_q, shape["d_k"], dtype=dtype)
    k = randn(seed + 1, *lead, n_k, shape["d_k"], dtype=dtype)
    v = randn(seed + 2, *lead, n_k, shape["d_v"], dtype=dtype)
    return q, k, v


def attention_by_definition(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                            bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, weights) of (A1) in float64, one query row at a time, as the formula reads (slow on
    purpose: the inputs are tiny); every query row must allow at least one key."""
    # numpy's, not torch's: torch.broadcast_shapes imports sympy (0.4 CPU-seconds) on first use
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, n_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    q, k, v = (t.double().expand(*lead, *t.shape[-2:]) for t in (q, k, v))
    allowed = torch.ones(n_q, n_k, dtype=torch.bool) if mask is None else mask
    added = torch.zeros(n_q, n_k, dtype=torch.float64) if bias is None else bias.double()
    allowed, added = allowed.expand(*lead, n_q, n_k), added.expand(*lead, n_q, n_k)
    weights = torch.zeros(*lead, n_q, n_k, dtype=torch.float64)
    out = torch.zeros(*lead, n_q, v.shape[-1], dtype=torch.float64)
    for index in itertools.product(*(range(n) for n in lead)):
        for i in range(n_q):
            scores = {j: float(q[index][i].dot(k[index][j])) / math.sqrt(d_k) + float(added[index][i, j])
                      for j in range(n_k) if allowed[index][i, j]}
            top = max(scores.values())  # exp(s - top) / sum: the softmax without overflow
            total = sum(math.exp(s - top) for s in scores.values())
            for j, s in scores.items():
                weights[index][i, j] = math.exp(s - top) / total
                out[index][i] += weights[index][i, j] * v[index][j]
    return out, weights


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


@suite.case(1, float64=True)
@given(shape=attention_shapes(), seed=seeds, dtype=dtypes)
def sdpa_shapes_and_dtype(student, shape, seed, dtype):
    """scaled_dot_product_attention returns out (..., n_q, d_v) and weights (..., n_q, n_k) in the inputs'
    dtype"""
    q, k, v = qkv(shape, seed, dtype)
    out, weights = student.call(SDPA, q, k, v)
    lead, n_q = shape["lead"], shape["n_q"]
    expect_tensor(out, (*lead, n_q, shape["d_v"]), "out")
    expect_tensor(weights, (*lead, n_q, shape["n_k"]), "weights")
    expect(out.dtype == dtype and weights.dtype == dtype,
           f"inputs are {dtype} but out is {out.dtype} and weights {weights.dtype}: compute in the inputs' "
           "dtype")


@suite.case(2, max_examples=8, float64=True)
@given(shape=attention_shapes(), seed=seeds, masked=st.booleans(), biased=st.booleans())
def sdpa_matches_definition(student, shape, seed, masked, biased):
    """scaled_dot_product_attention gives (A1)'s weights and output, computed here from the definition, with
    and without mask and bias (float64)"""
    q, k, v = qkv(shape, seed, torch.float64)
    n_q, n_k = shape["n_q"], shape["n_k"]
    kwargs = {}
    if masked:
        kwargs["mask"] = random_mask(seed, n_q, n_k)
    if biased:
        kwargs["bias"] = randn(seed + 3, n_q, n_k)
    out, weights = student.call(SDPA, q, k, v, **kwargs)
    expected_out, expected_weights = attention_by_definition(q, k, v, kwargs.get("mask"), kwargs.get("bias"))
    with_ = " and ".join(kwargs) or "no mask or bias"
    places = ["the scale", "how the mask enters" if masked else "",
              "where the bias is added" if biased else "", "the softmax's axis"]
    tol = TOLERANCES[torch.float64]._asdict()
    expect_close(weights, expected_weights, f"weights (d_k={shape['d_k']}, with {with_})", **tol,
                 hint=f"look at each step of {A1}: {', '.join(filter(None, places))}")
    expect_close(out, expected_out, f"out (d_k={shape['d_k']}, with {with_}; the weights are right)", **tol,
                 hint="out = weights v: each query's output is its weights' mix of the value rows")


@suite.case(1, float64=True)
@given(shape=attention_shapes(), seed=seeds)
def sdpa_rows_are_distributions(student, shape, seed):
    """weights are >= 0, zero at masked keys, and each row sums to 1 over the allowed keys"""
    q, k, v = qkv(shape, seed, torch.float64)
    mask = random_mask(seed, shape["n_q"], shape["n_k"])
    _, weights = student.call(SDPA, q, k, v, mask=mask)
    expect_tensor(weights, (*shape["lead"], shape["n_q"], shape["n_k"]), "weights", finite=True)
    expect(bool((weights >= 0).all()), "weights has negative entries: is the softmax applied?")
    leaked = weights.masked_fill(mask, 0).abs().max().item()
    expect(leaked < 1e-9, f"a masked key (mask False) gets weight {leaked:.3g}, expected 0 "
                          f"(mask True means ALLOWED); mask:\n{mask.int().tolist()}")
    sums = weights.sum(-1)
    worst = (sums - 1).abs().argmax().item()
    row = worst % shape["n_q"]
    expect(bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-6)),
           f"weights rows must sum to 1 over allowed keys; row {row} sums to "
           f"{sums.flatten()[worst].item():.4g}{_why_rows_do_not_sum_to_one(weights, q, k, mask)}; "
           f"mask:\n{mask.int().tolist()}")


def _why_rows_do_not_sum_to_one(weights: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                                mask: torch.Tensor) -> str:
    """The cause of rows that do not sum to 1, when the weights match it: a softmax over the query
    axis, or the mask applied after the softmax (the kept weights not renormalised); else ""."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    over_queries = scores.masked_fill(~mask, float("-inf")).softmax(dim=-2).nan_to_num(0.0)
    masked_after = scores.softmax(dim=-1).masked_fill(~mask, 0.0)
    tol = TOLERANCES[torch.float64]._asdict()
    if close(weights, over_queries, **tol):
        return (": your weights are a softmax over the query axis (dim=-2, the columns sum to 1): take it "
                "over the key axis (dim=-1)")
    if close(weights, masked_after, **tol):
        return (": your weights are the softmax over every key with the masked ones zeroed afterwards, so "
                "the allowed ones no longer sum to 1: mask the scores (-inf or a large negative number) "
                "before the softmax")
    return ""


@suite.case(2, float64=True)
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


@suite.case(1, float64=True)
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
    """MultiHeadAttention has q/k/v/out_proj Linear(d_model, d_model), returns (B, T, d_model) and weights (B,
    H, T, T)"""
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
    expect_tensor(weights, (B, n_heads, T, T), "weights", finite=True)
    expect(bool(torch.allclose(weights.sum(-1), torch.ones(B, n_heads, T), atol=1e-5)),
           "each head's weight rows must sum to 1")


def own_heads(student: Student, mha: Remote, x: torch.Tensor, n_heads: int, rope: bool,
              **kwargs: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What MultiHeadAttention's contract makes of x with the module's own weights, as (y, weights):
    head h attends with features [h*d_head, (h+1)*d_head) of q_proj(x), k_proj(x) and v_proj(x)
    (rotated by the student's apply_rope when rope), through (A1)'s definition ("definition") or
    the student's own scaled_dot_product_attention ("own"), then out_proj of the heads' outputs."""
    state = mha.state_dict()
    d_head = x.shape[-1] // n_heads

    def heads(name: str) -> torch.Tensor:
        projected = F.linear(x, state[f"{name}.weight"], state.get(f"{name}.bias"))
        return torch.stack([projected[..., h * d_head:(h + 1) * d_head] for h in range(n_heads)], dim=1)

    q, k, v = heads("q_proj"), heads("k_proj"), heads("v_proj")
    if rope:
        q, k = student.call(ROPE, q), student.call(ROPE, k)
    mask, bias = kwargs.get("mask"), kwargs.get("bias")
    candidates = {"definition": attention_by_definition(q, k, v, mask, bias),
                  "own": student.call(SDPA, q, k, v, **kwargs)}
    merged = {}
    for name, (out, weights) in candidates.items():
        expect_tensor(out, q.shape, "scaled_dot_product_attention's out on the heads")
        concatenated = torch.cat(out.unbind(dim=1), dim=-1)  # head h's output in features of head h
        merged[name] = (F.linear(concatenated, state["out_proj.weight"], state.get("out_proj.bias")), weights)
    return merged


def expect_heads(student: Student, mha: Remote, x: torch.Tensor, n_heads: int, rope: bool, what: str,
                 **kwargs: torch.Tensor) -> None:
    """mha(x, return_weights=True) equals own_heads' (y, weights) for one of its candidates."""
    y, weights = mha(x, return_weights=True, **kwargs)
    expected = own_heads(student, mha, x, n_heads, rope, **kwargs)
    tol = TOLERANCES[torch.float64]._asdict()
    B, T, _ = x.shape
    expect_tensor(weights, (B, n_heads, T, T), f"the weights of {what}", finite=True)
    if any(close(weights, w, **tol) for _, w in expected.values()):
        if any(close(y, e, **tol) for e, _ in expected.values()):
            return
        rotated = "; with rope only the queries and keys are rotated" if rope else ""
        expect_close(y, expected["definition"][0], f"y of {what} (its weights are right)", **tol,
                     hint="y is out_proj applied, token by token, to the heads' outputs put back side by "
                          f"side (head h's output in features [h*d_head, (h+1)*d_head)){rotated}")
    diff = (weights - expected["definition"][1]).abs().amax(dim=(0, 2, 3))
    head = int(diff.argmax())
    raise Failed(f"head {head}'s weights of {what} differ by {diff[head].item():.3g} from (A1) on its own "
                 f"features [{head}*d_head, {head + 1}*d_head) of q_proj(x) and k_proj(x)"
                 f"{', rotated by your apply_rope,' if rope else ''} "
                 f"(d_head = d_model // n_heads = {x.shape[-1] // n_heads}): look at how the projections "
                 "are split into heads (each token keeps its own features), the scale 1/sqrt(d_head), "
                 f"and where the {' and '.join(kwargs)} enter{'s' if len(kwargs) == 1 else ''}")


@suite.case(2, max_examples=8, float64=True)
@given(config=mha_configs(rope=False), seed=seeds, biased=st.booleans())
def mha_heads_match_own_attention(student, config, seed, biased):
    """each head of MultiHeadAttention attends with its own slice of your q/k/v projections; y is out_proj of
    the heads (float64)"""
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]
    mha = student.call(MHA, d_model, n_heads).to(torch.float64).eval()
    kwargs = {"mask": causal(T)} | ({"bias": randn(seed + 1, n_heads, T, T)} if biased else {})
    what = f"MultiHeadAttention({d_model}, {n_heads}) with a causal mask" + (" and a bias" if biased else "")
    expect_heads(student, mha, randn(seed, B, T, d_model), n_heads, False, what, **kwargs)


@suite.case(1, max_examples=6, float64=True)
@given(config=mha_configs(rope=True), seed=seeds)
def mha_rope_heads(student, config, seed):
    """with rope=True, each head's queries and keys go through your apply_rope (positions 0..T-1) before the
    scores (float64)"""
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]
    mha = student.call(MHA, d_model, n_heads, rope=True).to(torch.float64).eval()
    what = f"MultiHeadAttention({d_model}, {n_heads}, rope=True) with a causal mask"
    expect_heads(student, mha, randn(seed, B, T, d_model), n_heads, True, what, mask=causal(T))


@suite.case(0.5, max_examples=4, float64=True)
@given(config=mha_configs(rope=False), seed=seeds)
def mha_weights_before_dropout(student, config, seed):
    """MultiHeadAttention(dropout=0.5) in train mode returns the weights before dropout: those of eval mode"""
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]
    mha = student.call(MHA, d_model, n_heads, dropout=0.5).to(torch.float64)
    x = randn(seed, B, T, d_model)
    _, in_eval = mha.eval()(x, mask=causal(T), return_weights=True)
    _, in_train = mha.train()(x, mask=causal(T), return_weights=True)
    expect_close(in_train, in_eval, "the weights returned in train mode", **EXACT._asdict(),
                 hint="the only difference between the two calls is train mode, so dropout: the returned "
                      "weights are taken after the softmax and before dropout (dropout applies only to the "
                      "weights that mix the values)")


def _probe_state(mha: Remote, n_heads: int, T: int, seed: int) -> dict[str, torch.Tensor]:
    """Weights under which MultiHeadAttention(n_heads * T, n_heads) shows its attention weights in y:
    random q_proj and k_proj (so the weights vary), v_proj the identity, out_proj the identity plus a
    bias c. Fed the one-hot tokens of _one_hot_tokens, head h's value of key k is e_k, so y - c holds
    each head's weights (dropped or not) side by side."""
    d_model = n_heads * T
    state = mha.state_dict()
    eye = torch.eye(d_model, dtype=torch.float64)
    probe = {"q_proj.weight": randn(seed, d_model, d_model), "v_proj.weight": eye,
             "k_proj.weight": randn(seed + 1, d_model, d_model), "out_proj.weight": eye}
    missing = [key for key in probe if key not in state]
    expect(not missing, f"MultiHeadAttention.state_dict() has no {missing} (see mha_contract)")
    biases = {key: torch.zeros_like(value) for key, value in state.items() if key.endswith(".bias")}
    if "out_proj.bias" in biases:
        biases["out_proj.bias"] = 1.0 + randn(seed + 2, d_model).abs()
    return {**state, **probe, **biases}


def _one_hot_tokens(B: int, T: int, n_heads: int) -> torch.Tensor:
    """(B, T, n_heads * T): token k is e_k in every head's slice of the features."""
    return torch.eye(T, dtype=torch.float64).repeat(1, n_heads).expand(B, T, n_heads * T).contiguous()


DROPPED_WEIGHTS = "the attention weights after the softmax, before they mix the values"


@suite.case(1, max_examples=4, float64=True)
@example(n_heads=2, p=0.5, seed=0)
@given(n_heads=st.integers(1, 2), p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def mha_dropout_on_weights(student, n_heads, p, seed):
    """MultiHeadAttention(dropout=p) is your dropout=0 module in eval mode; in train mode it drops each
    attention weight with probability p and scales the kept ones by 1/(1-p), nothing else (float64)"""
    B, T = 8, 8
    mha, plain = (student.call(MHA, n_heads * T, n_heads, dropout=rate).to(torch.float64)
                  for rate in (p, 0.0))
    state = _probe_state(mha, n_heads, T, seed)
    mha.load_state_dict(state)
    plain.load_state_dict(state)
    x = _one_hot_tokens(B, T, n_heads)
    y, weights = mha.eval()(x, return_weights=True)
    expect_close(y, plain.eval()(x), f"y in eval mode with dropout={p} (compared with your dropout=0 module)",
                 **EXACT._asdict(), hint=DROPOUT_OFF_IN_EVAL)
    c = state.get("out_proj.bias", torch.zeros(n_heads * T, dtype=torch.float64))
    kept = y - c
    shown = torch.cat(expect_tensor(weights, (B, n_heads, T, T), "weights").unbind(1), dim=-1)
    if not close(kept, shown, atol=1e-9, rtol=1e-5):
        return  # the heads themselves are wrong here: mha_heads_match_own_attention says how
    mha.train()
    student.manual_seed(seed)
    dropped = expect_tensor(mha(x), x.shape, "y in train mode") - c
    expect_dropout(dropped, kept, p, "the attention weights (seen through v_proj = out_proj = identity)",
                   f"dropout acts on {DROPPED_WEIGHTS}",
                   {"the dropout is applied to the output y instead of to the attention weights":
                        ((kept + c) / (1 - p) - c, -c)})
    # Dropping v (or whole keys) drops a key's weight for every query at once; nn.Dropout on the
    # weights drops each on its own (a dropped weight's 7 other queries all dropped too: p^7 <= 1%).
    gone = (dropped.abs() <= 1e-9).unflatten(-1, (n_heads, T))  # (B, queries, heads, keys)
    whole = gone.all(dim=1, keepdim=True).expand_as(gone)
    together = whole[gone].double().mean().item() if gone.any() else 0.0
    expect(together < 0.5, f"in train mode with dropout={p}, {together:.0%} of the dropped weights belong to "
                           "keys dropped for every query at once: the dropout is applied to the values v (or "
                           f"the keys), not to each of {DROPPED_WEIGHTS}")


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
