"""block.py, hidden: TransformerBlock against the reference, pre-norm (B1) and post-norm (B2),
with the classic mistakes named, gradients and dropout (10 points)."""
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from ...reference import ref
from ...sandbox.client import StudentError
from ...spec import ACTIVATIONS, EXACT, GRADIENT_TOLERANCE, TOLERANCES, Visibility
from .. import Suite
from ..checks import Failed, expect, expect_close, expect_tensor
from ..public.block import BLOCK, d_ffs, norms
from ..strategies import causal, dtypes, mha_configs, randn, seeds
from ..twins import reference_grads, reference_module, student_twin, twins

suite = Suite("block", Visibility.HIDDEN)
FORMULA = {
    "pre": "(B1) pre-norm: h = x + dropout(attn(norm1(x))); y = h + dropout(ffn(norm2(h)))",
    "post": "(B2) post-norm: h = norm1(x + dropout(attn(x))); y = norm2(h + dropout(ffn(h)))",
}
activations = st.sampled_from(ACTIVATIONS)


def _alibi_like(n_heads: int, T: int, dtype: torch.dtype) -> torch.Tensor:
    """An ALiBi-shaped bias (n_heads, T, T), -m_h |i - j|, with steeper slopes (1, 1/2, 1/4, ...) than
    ALiBi's so that a bias left out changes the output well beyond the tolerance even for tiny T."""
    slopes = 2.0 ** -torch.arange(n_heads, dtype=torch.float64)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs().to(torch.float64)
    return (-slopes[:, None, None] * distance).to(dtype)


def _block_twins(student, config: dict, seed: int, dtype: torch.dtype, **kwargs):
    """Student's and reference's TransformerBlock with one perturbed state dict, both in eval mode."""
    return twins(student, BLOCK, ref.block.TransformerBlock, seed, dtype,
                 d_model=config["d_model"], n_heads=config["n_heads"], rope=config["rope"], **kwargs)


def _block_inputs(config: dict, seed: int, dtype: torch.dtype, masked: bool, biased: bool) -> tuple:
    B, T, H = config["B"], config["T"], config["n_heads"]
    x = randn(seed, B, T, config["d_model"], dtype=dtype)
    mask = causal(T) if masked else None
    bias = _alibi_like(H, T, dtype) if biased else None
    return x, mask, bias


def _block_variants(reference, x, mask, bias, norm: str) -> dict[str, torch.Tensor]:
    """What a block with a classic mistake returns (computed here, never shown)."""
    attn, ffn, n1, n2 = reference.attn, reference.ffn, reference.norm1, reference.norm2

    def a(z, m=mask, b=bias):
        return attn(z, m, b)

    def formula(kind, attend=a):
        if kind == "pre":
            h = x + attend(n1(x))
            return h + ffn(n2(h))
        h = n1(x + attend(x))
        return n2(h + ffn(h))

    with torch.no_grad():
        h_pre, h_post = x + a(n1(x)), n1(x + a(x))
        if norm == "pre":
            x_n = n1(x)
            h_n = x_n + a(x_n)
            variants = {
                "norm=\"pre\" computes the post-norm formula (B2) instead of (B1)": formula("post"),
                "norm1 is used for both sublayers (B1 feeds norm2(h) to ffn)": h_pre + ffn(n1(h_pre)),
                "the residual stream itself is normalised (x = norm1(x); h = x + attn(x)): (B1) adds "
                "attn(norm1(x)) to the unnormalised x": h_n + ffn(n2(h_n)),
                "the attention sublayer has no residual (h = attn(norm1(x)) without x +, see B1)":
                    a(n1(x)) + ffn(n2(a(n1(x)))),
                "the feed-forward sublayer has no residual (y = ffn(norm2(h)) without h +, see B1)":
                    ffn(n2(h_pre)),
                "the attention input is not normalised (attn(x) instead of attn(norm1(x)), see B1)":
                    (x + a(x)) + ffn(n2(x + a(x))),
                "norm1 and norm2 are swapped (B1)": (x + a(n2(x))) + ffn(n1(x + a(n2(x)))),
            }
        else:
            variants = {
                "norm=\"post\" computes the pre-norm formula (B1) instead of (B2)": formula("pre"),
                "norm1 is used for both sublayers (B2 ends with norm2(h + ffn(h)))": n1(h_post + ffn(h_post)),
                "the attention sublayer has no residual (h = norm1(attn(x)) without x +, see B2)":
                    n2(n1(a(x)) + ffn(n1(a(x)))),
                "the feed-forward sublayer has no residual (y = norm2(ffn(h)) without h +, see B2)":
                    n2(ffn(h_post)),
                "norm1 and norm2 are swapped (B2)": n1(n2(x + a(x)) + ffn(n2(x + a(x)))),
            }
        formula_name = "(B1)" if norm == "pre" else "(B2)"
        if mask is not None:
            variants[f"the mask is not passed on to self.attn {formula_name}"] = \
                formula(norm, lambda z: a(z, m=None))
        if bias is not None:
            variants[f"the bias (ALiBi) is not passed on to self.attn {formula_name}"] = \
                formula(norm, lambda z: a(z, b=None))
    return variants


def _sublayer_note(block, reference, x, mask, bias, norm: str, tol: dict) -> str:
    """If the student's own attn or ffn submodule disagrees with the reference on the block's
    inputs, say so: then the block's formula may well be right."""
    with torch.no_grad():
        attn_in = reference.norm1(x) if norm == "pre" else x
        ffn_in = randn(7, *x.shape, dtype=x.dtype)
        expected_attn, expected_ffn = reference.attn(attn_in, mask, bias), reference.ffn(ffn_in)
    notes = []
    try:
        if not torch.allclose(block.method("attn", attn_in, mask=mask, bias=bias).to(torch.float64),
                              expected_attn.to(torch.float64), **tol):
            notes.append("self.attn itself (MultiHeadAttention) gives a different output on the same input, "
                         "with this mask and bias: see the attention tests first")
        if not torch.allclose(block.method("ffn", ffn_in).to(torch.float64), expected_ffn.to(torch.float64),
                              **tol):
            notes.append("self.ffn itself (FeedForward) gives a different output: "
                         "see the feedforward tests first")
    except (StudentError, AttributeError, TypeError, RuntimeError):
        return ""
    return "; ".join(notes)


def _expect_block(block, reference, config: dict, seed: int, dtype: torch.dtype, norm: str,
                  masked: bool, biased: bool) -> None:
    x, mask, bias = _block_inputs(config, seed, dtype, masked, biased)
    y, weights = block(x, mask=mask, bias=bias, return_weights=True)
    with torch.no_grad():
        expected_y, expected_weights = reference(x, mask=mask, bias=bias, return_weights=True)
    tol = TOLERANCES[dtype]._asdict()
    inputs = [", rope"] * config["rope"] + [", causal mask"] * masked + [", ALiBi-like bias"] * biased
    what = f"y (norm={norm!r}, d_model={config['d_model']}, n_heads={config['n_heads']}{''.join(inputs)})"

    def diagnoses() -> dict[str, torch.Tensor]:
        # only the mistakes that change y well beyond the tolerance, so that a name is never a guess
        variants = _block_variants(reference, x, mask, bias, norm)
        return {sentence: variant for sentence, variant in variants.items()
                if not torch.allclose(variant, expected_y, atol=100 * tol["atol"], rtol=100 * tol["rtol"])}

    try:
        expect_close(y, expected_y, what, **tol, hint=f"check {FORMULA[norm]}", diagnoses=diagnoses)
    except Failed as failed:
        note = _sublayer_note(block, reference, x, mask, bias, norm, tol)
        if note:
            raise Failed(f"{failed}; {note}") from None
        raise
    expect_close(weights, expected_weights, "weights", **tol,
                 hint=f"return the weights of self.attn, called on {'norm1(x)' if norm == 'pre' else 'x'} "
                      f"with the block's mask and bias: {FORMULA[norm]}")


def _matches_reference(student, norm, config, d_ff, activation, dtype, seed, masked, biased):
    block, reference = _block_twins(student, config, seed, dtype, d_ff=d_ff, norm=norm, activation=activation)
    _expect_block(block, reference, config, seed, dtype, norm, masked, biased)


# LayerNorm over 1-3 features is nearly constant (d_model=1: always its bias), which would hide
# most mistakes in post-norm: the hidden tests use d_model >= 4.
configs = mha_configs().filter(lambda config: config["d_model"] >= 4)


def _config(d_model, n_heads, rope, B=2, T=5):
    return {"d_model": d_model, "n_heads": n_heads, "rope": rope, "B": B, "T": T}


def _cover(test):
    """Explicit examples first (mask and ALiBi bias, rope on and off, gelu and relu, both dtypes),
    then a few drawn ones."""
    rows = [(_config(8, 2, False), 6, "gelu", torch.float64, 1, True, True),
            (_config(12, 3, True, 1, 6), 5, "relu", torch.float32, 2, True, True),
            (_config(8, 4, True, 2, 4), 3, "gelu", torch.float32, 3, False, True),
            (_config(6, 1, False, 3, 3), 7, "relu", torch.float64, 4, True, False)]
    for config, d_ff, activation, dtype, seed, masked, biased in reversed(rows):
        test = example(config=config, d_ff=d_ff, activation=activation, dtype=dtype, seed=seed,
                       masked=masked, biased=biased)(test)
    return test


@suite.case(3, max_examples=4)
@_cover
@given(config=configs, d_ff=d_ffs, activation=activations, dtype=dtypes, seed=seeds,
       masked=st.booleans(), biased=st.booleans())
def block_pre_norm_matches_reference(student, config, d_ff, activation, dtype, seed, masked, biased):
    """norm="pre" with the reference's weights gives the reference's y and weights (B1), with masks, ALiBi, rope"""  # noqa: E501
    _matches_reference(student, "pre", config, d_ff, activation, dtype, seed, masked, biased)


@suite.case(3, max_examples=4)
@_cover
@given(config=configs, d_ff=d_ffs, activation=activations, dtype=dtypes, seed=seeds,
       masked=st.booleans(), biased=st.booleans())
def block_post_norm_matches_reference(student, config, d_ff, activation, dtype, seed, masked, biased):
    """norm="post" with the reference's weights gives the reference's y and weights (B2), with masks, ALiBi, rope"""  # noqa: E501
    _matches_reference(student, "post", config, d_ff, activation, dtype, seed, masked, biased)


@suite.case(2, max_examples=3)
@example(config=_config(8, 2, True), d_ff=6, norm="pre", seed=5, biased=True)
@example(config=_config(12, 3, False), d_ff=4, norm="post", seed=6, biased=True)
@given(config=configs, d_ff=d_ffs, norm=norms, seed=seeds, biased=st.booleans())
def block_gradients(student, config, d_ff, norm, seed, biased):
    """TransformerBlock's gradients w.r.t. x and every parameter equal the reference's (float64)"""
    block, reference = _block_twins(student, config, seed, torch.float64, d_ff=d_ff, norm=norm)
    x, mask, bias = _block_inputs(config, seed, torch.float64, masked=True, biased=biased)
    grad_y = randn(seed + 2, *x.shape)
    _, grads, param_grads = block.grad([x], {"mask": mask, "bias": bias}, grad_outputs=[grad_y], wrt=(0,))
    expected_inputs, expected_params = reference_grads(reference, [x], grad_y, mask=mask, bias=bias)
    hint = (f"the gradients follow from {FORMULA[norm]}: if y passes its tests, look for a .detach(), "
            ".item(), numpy or .data on the way; otherwise fix y first")
    tol = GRADIENT_TOLERANCE._asdict()
    expect(grads.get(0) is not None, "no gradient reaches x: is the graph cut (.detach(), .item(), numpy)?")
    expect_close(grads[0], expected_inputs[0], f"d(y)/d(x) (norm={norm!r})", **tol, hint=hint)
    for name, expected in expected_params.items():
        expect(param_grads.get(name) is not None,
               f"parameter {name} gets no gradient: is it used in {FORMULA[norm]}?")
        expect_close(param_grads[name], expected, f"d(y)/d({name}) (norm={norm!r})", **tol, hint=hint)


@suite.case(1, max_examples=4)
@given(config=configs, d_ff=d_ffs, norm=norms, seed=seeds, p=st.sampled_from([0.1, 0.3, 0.5]))
def block_dropout_eval(student, config, d_ff, norm, seed, p):
    """in eval mode, TransformerBlock(dropout=p) gives the same y and weights as TransformerBlock(dropout=0)"""  # noqa: E501
    kwargs = {"d_model": config["d_model"], "n_heads": config["n_heads"], "d_ff": d_ff, "norm": norm,
              "rope": config["rope"]}
    reference = reference_module(ref.block.TransformerBlock, seed, torch.float64, **kwargs)
    block, block_without = [student_twin(student, BLOCK, reference, torch.float64, dropout=dropout, **kwargs)
                            for dropout in (p, 0.0)]
    x, mask, _ = _block_inputs(config, seed, torch.float64, masked=True, biased=False)
    y, weights = block(x, mask=mask, return_weights=True)
    expected_y, expected_weights = block_without(x, mask=mask, return_weights=True)
    expect_tensor(expected_y, x.shape, "y with dropout=0")
    hint = f"dropout must be off in eval mode (use nn.Dropout): {FORMULA[norm]}"
    mine = "(compared with your dropout=0 block)"
    expect_close(y, expected_y, f"y in eval mode with dropout={p} {mine}", **EXACT._asdict(), hint=hint)
    expect_close(weights, expected_weights, f"weights in eval mode with dropout={p} {mine}",
                 **EXACT._asdict(), hint=hint)


_DROP_SHAPE = (4, 16, 32)  # B, T, d_model: 2048 entries per sublayer, the rate known to +-0.011 (1 sd)


@suite.case(1, max_examples=3)
@given(p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def block_dropout_train(student, p, seed):
    """in train mode (pre-norm), each sublayer's output goes through the residual dropout at rate p, scaled by 1/(1-p)"""  # noqa: E501
    B, T, d = _DROP_SHAPE
    kwargs = {"d_model": d, "n_heads": 4, "d_ff": d, "dropout": p}
    reference = reference_module(ref.block.TransformerBlock, seed, torch.float64, **kwargs)
    # attn and ffn output their out_proj / fc2 bias whatever their inner dropout does, so that
    # y - x = dropout(a) + dropout(f): the residual dropout alone, on known constants a and f
    # (chosen so that every combination of dropped / kept / never dropped gives a distinct sum).
    a, f = 1.0, 3.7
    with torch.no_grad():
        reference.attn.out_proj.weight.zero_()
        reference.attn.out_proj.bias.fill_(a)
        reference.ffn.fc2.weight.zero_()
        reference.ffn.fc2.bias.fill_(f)
    block = student_twin(student, BLOCK, reference, torch.float64, **kwargs)
    x = randn(seed, B, T, d)
    mask = causal(T)
    y_eval = expect_tensor(block.eval()(x, mask=mask), x.shape, "y in eval mode")
    expect(bool(torch.allclose(y_eval, x + a + f, atol=1e-9)),
           f"with attn and ffn set to return constants a and f (out_proj and fc2 weights 0, dropout={p}), "
           f"a pre-norm block in eval mode must give y = x + a + f, and yours does not: check "
           f"{FORMULA['pre']}, that dropout is off in eval mode, and that attn and ffn end with out_proj "
           "and fc2")
    block.train()
    student.call("torch.manual_seed", seed)
    y = expect_tensor(block(x, mask=mask), x.shape, "y in train mode")
    expect(bool(torch.isfinite(y).all()), f"y in train mode with dropout={p} has NaN or inf")
    # each entry of y - x is one of 9 sums: (attention state, feed-forward state)
    values = {"attention": (0.0, a / (1 - p), a), "feed-forward": (0.0, f / (1 - p), f)}
    sums = torch.tensor([va + vf for va in values["attention"] for vf in values["feed-forward"]],
                        dtype=torch.float64)
    distance, combo = ((y - x).unsqueeze(-1) - sums).abs().min(dim=-1)
    explained = distance < 1e-6
    unexplained = 1 - explained.double().mean().item()
    expect(bool(explained.all()),
           f"in train mode with dropout={p}, with attn and ffn returning constants a and f, each entry of "
           f"y - x should be dropout(a) + dropout(f) (each term 0 or scaled by 1/(1-p)), but "
           f"{unexplained:.0%} of the entries are not: one residual dropout of rate p on each sublayer's "
           f"output, {FORMULA['pre']}")
    for name, state in (("attention", combo // 3), ("feed-forward", combo % 3)):
        # state: 0 dropped, 1 kept and scaled by 1/(1-p), 2 passed through unchanged
        expect(not (state == 2).all(),
               f"in train mode with dropout={p}, the {name} sublayer's output is never dropped: "
               f"apply self.dropout to it before the residual sum, {FORMULA['pre']}")
        expect(not (state == 2).any(),
               f"in train mode with dropout={p}, the surviving entries of the {name} sublayer's output are "
               f"not scaled by 1/(1-p): use nn.Dropout, {FORMULA['pre']}")
        rate = (state == 0).double().mean().item()
        expect(abs(rate - p) < 0.06,
               f"in train mode with dropout={p}, the residual dropout zeroes {rate:.1%} of the {name} "
               f"sublayer's output, expected about {p:.0%}: {FORMULA['pre']}, "
               "with self.dropout = nn.Dropout(dropout)")
