"""block.py, hidden: (B1) and (B2) composed from the block's own sublayers, with the classic
mistakes named; gradients against the block's own forward; dropout. No reference output: a block is
judged on what it adds."""
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from ...spec import EXACT, TOLERANCES, Visibility
from ...student import Remote
from .. import Suite
from ..checks import Failed, expect, expect_close, expect_dropout, expect_grad_close, expect_tensor
from ..fallback import checked_in, in_runnable_dtype
from ..public.block import (
    BLOCK,
    FORMULA,
    SUBLAYERS,
    DifferentiableSublayers,
    Sublayers,
    activations,
    block_inputs,
    configs,
    d_ffs,
    describe,
    norms,
    own_formula,
    perturb_own,
    sublayers_probe,
)
from ..strategies import causal, dtypes, randn, seeds
from ..twins import reference_module, student_twin
from .reference import ref

suite = Suite("block", Visibility.HIDDEN)


def _block_variants(parts: Sublayers, x: torch.Tensor, norm: str) -> dict[str, torch.Tensor]:
    """What a block with a classic mistake returns, composed from the block's own sublayers."""
    def n1(z):
        return parts.norm("norm1", z)

    def n2(z):
        return parts.norm("norm2", z)

    def a(z, **kwargs):
        return parts.attend(z, **kwargs)[0]

    ffn = parts.feed

    def formula(kind, **kwargs):
        if kind == "pre":
            h = x + a(n1(x), **kwargs)
            return h + ffn(n2(h))
        h = n1(x + a(x, **kwargs))
        return n2(h + ffn(h))

    if norm == "pre":
        h_pre, x_n = x + a(n1(x)), n1(x)
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
        h_post = n1(x + a(x))
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
    if parts.mask is not None:
        variants[f"the mask is not passed on to self.attn {formula_name}"] = formula(norm, masked=False)
    if parts.bias is not None:
        variants[f"the bias (ALiBi) is not passed on to self.attn {formula_name}"] = \
            formula(norm, biased=False)
    return variants


def _expect_formula(student, norm, config, d_ff, activation, dtype, seed, masked, biased) -> None:

    wanted = dtype

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        block = student.call(BLOCK, config["d_model"], config["n_heads"], d_ff, norm=norm,
                             rope=config["rope"], activation=activation)
        block = perturb_own(block.to(dtype), seed).eval()
        x, mask, bias = block_inputs(config, seed, dtype, masked, biased)
        y, weights = block(x, mask=mask, bias=bias, return_weights=True)
        parts = Sublayers(block, mask, bias)
        expected_y, expected_weights = own_formula(parts, x, norm)
        tol = TOLERANCES[dtype]._asdict()
        what = describe(config, norm, masked, biased) + checked_in(dtype, wanted, SUBLAYERS)

        def diagnoses() -> dict[str, torch.Tensor]:
            # only the mistakes that change y well beyond the tolerance, so that a name is never a guess
            variants = _block_variants(parts, x, norm)
            return {sentence: variant for sentence, variant in variants.items()
                    if not torch.allclose(variant, expected_y, atol=100 * tol["atol"],
                                          rtol=100 * tol["rtol"])}

        expect_close(y, expected_y, f"y ({what})", **tol, diagnoses=diagnoses,
                     hint=f"check {FORMULA[norm]}, with your own self.attn, self.ffn, self.norm1, self.norm2")
        expect_close(weights, expected_weights, f"weights ({what})", **tol,
                     hint="return the weights of self.attn, called on "
                          f"{'norm1(x)' if norm == 'pre' else 'x'} with the block's mask and bias: "
                          f"{FORMULA[norm]}")
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), dtype)


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


@suite.case(2, max_examples=4, float64=True)
@_cover
@given(config=configs, d_ff=d_ffs, activation=activations, dtype=dtypes, seed=seeds,
       masked=st.booleans(), biased=st.booleans())
def block_pre_norm_formula(student, config, d_ff, activation, dtype, seed, masked, biased):
    """norm="pre": y and weights are (B1) of the block's own sublayers, with masks, ALiBi, rope; mistakes
    named"""
    _expect_formula(student, "pre", config, d_ff, activation, dtype, seed, masked, biased)


@suite.case(2, max_examples=4, float64=True)
@_cover
@given(config=configs, d_ff=d_ffs, activation=activations, dtype=dtypes, seed=seeds,
       masked=st.booleans(), biased=st.booleans())
def block_post_norm_formula(student, config, d_ff, activation, dtype, seed, masked, biased):
    """norm="post": y and weights are (B2) of the block's own sublayers, with masks, ALiBi, rope; mistakes
    named"""
    _expect_formula(student, "post", config, d_ff, activation, dtype, seed, masked, biased)


# ------------------------------------------------------------------ gradients
FD_STEP = 1e-6
"""Central differences in float64: off by ~1e-12 (truncation) and ~1e-10 (rounding) of the output's
scale, where a path cut from the graph changes the directional derivative by order one."""


def expect_gradients_follow_forward(module: Remote, args: list, kwargs: dict, grad_out: torch.Tensor,
                                    seed: int, what: str, hint: str) -> None:
    """The student's backward (w.r.t. args[0] when it is floating point, and every parameter) agrees
    with central differences of the student's own float64 forward, along random directions.

    Both sides run the student's code, so a mistake in the forward (or in another component) does
    not show here; a path cut from the graph (.detach(), .item(), .data, numpy) does."""
    x = args[0]
    wrt = (0,) if x.is_floating_point() else ()
    _, input_grads, param_grads = module.grad(args, kwargs, grad_outputs=[grad_out], wrt=wrt)
    state = module.state_dict()
    params = {name: state[name] for name in param_grads}

    def output(inputs: list) -> torch.Tensor:
        out = module(*inputs, **kwargs)
        return expect_tensor(out[0] if isinstance(out, tuple) else out, grad_out.shape, f"{what}'s output")

    def numeric(dx: torch.Tensor | None, dparams: dict[str, torch.Tensor]) -> float:
        """d/de <grad_out, forward(x + e dx; params + e dparams)> at e = 0."""
        sums = []
        for sign in (1.0, -1.0):
            moved = {n: params[n] + sign * FD_STEP * d for n, d in dparams.items()}
            module.load_state_dict(moved, strict=False)
            inputs = [x if dx is None else x + sign * FD_STEP * dx, *args[1:]]
            sums.append((output(inputs) * grad_out).sum().item())
        module.load_state_dict({n: params[n] for n in dparams}, strict=False)
        return (sums[0] - sums[1]) / (2 * FD_STEP)

    def agrees(grads: list[torch.Tensor | None], directions: list[torch.Tensor], expected: float) -> bool:
        terms = [torch.zeros(()) if g is None else (g.to(torch.float64) * d).sum() for g, d in zip(
            grads, directions, strict=True)]
        scale = sum(abs(float(t)) for t in terms) + abs(expected)
        return abs(sum(float(t) for t in terms) - expected) <= 1e-6 * scale + 1e-9

    if wrt:
        expect(input_grads.get(0) is not None, f"no gradient reaches the input of {what}: is the graph cut "
                                               "(.detach(), .item(), numpy)?")
        dx = randn(seed + 3, *x.shape)
        expect(agrees([input_grads[0]], [dx], numeric(dx, {})),
               f"the gradient of {what} w.r.t. its input does not match how its output changes when the "
               f"input moves: {hint}")
    directions = {name: randn(seed + 10 + i, *p.shape) for i, (name, p) in enumerate(params.items())}
    if agrees([param_grads[n] for n in params], list(directions.values()), numeric(None, directions)):
        return
    for name, direction in directions.items():  # the joint check failed: name the first culprit
        if not agrees([param_grads[name]], [direction], numeric(None, {name: direction})):
            if param_grads[name] is None:
                raise Failed(f"parameter {name} of {what} gets no gradient, yet the output changes when it "
                             f"moves: {hint}")
            raise Failed(f"the gradient of {what} w.r.t. {name} does not match how the output changes when "
                         f"{name} moves: {hint}")
    raise Failed(f"the parameter gradients of {what} do not match how its output changes: {hint}")


def expect_gradients_match(module: Remote, args: list, kwargs: dict, grad_out: torch.Tensor,
                           input_grad: torch.Tensor | None, param_grads: dict[str, torch.Tensor | None],
                           what: str, hint: str) -> None:
    """The student's backward through `module` (w.r.t. args[0] when it is floating point, and each
    parameter in param_grads) gives these gradients, at the tolerance of grad_out's dtype.

    For a float32 check (fallback.py): the expected gradients are the module's formula backpropagated
    through its own parts, each by the student's own autograd, so only what the module adds shows;
    central differences in float32 would be too coarse. A part that gives a parameter no gradient
    leaves it unchecked (that part's tests say why)."""
    x = args[0]
    wrt = (0,) if x.is_floating_point() else ()
    module.method("zero_grad")  # the worker's .grad fields accumulate across calls
    _, input_grads, actual = module.grad(args, kwargs, grad_outputs=[grad_out], wrt=wrt)
    tolerance = TOLERANCES[grad_out.dtype]
    pairs = [("its input", input_grads.get(0), input_grad)] if wrt else []
    pairs += [(name, actual.get(name), expected) for name, expected in param_grads.items()]
    for name, grad, expected in pairs:
        if expected is None:
            continue
        expect(grad is not None, f"no gradient reaches {name} of {what}, where backpropagating through your "
                                 f"own parts gives one: {hint}")
        expect_grad_close(grad, expected, f"the gradient of {what} w.r.t. {name}", tolerance=tolerance,
                          hint=hint, float64=False)


@suite.case(1, max_examples=3, float64=True)
@example(config=_config(8, 2, True), d_ff=6, norm="pre", seed=5, biased=True)
@example(config=_config(12, 3, False), d_ff=4, norm="post", seed=6, biased=True)
@given(config=configs, d_ff=d_ffs, norm=norms, seed=seeds, biased=st.booleans())
def block_gradients(student, config, d_ff, norm, seed, biased):
    """TransformerBlock's gradients w.r.t. x and every parameter follow its own forward (float64; float32
    through your own attn and ffn's backward where they cannot run in float64)"""
    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        block = student.call(BLOCK, config["d_model"], config["n_heads"], d_ff, norm=norm,
                             rope=config["rope"])
        block = perturb_own(block.to(dtype), seed).eval()
        x, mask, bias = block_inputs(config, seed, dtype, masked=True, biased=biased)
        grad_out = randn(seed + 2, *x.shape, dtype=dtype)
        what = f"TransformerBlock(norm={norm!r})"
        hint = "a .detach(), .item(), .data, numpy or torch.no_grad() on the way cuts the graph"
        if dtype == torch.float64:
            expect_gradients_follow_forward(block, [x], {"mask": mask, "bias": bias}, grad_out, seed, what,
                                            hint)
            return
        # your attn or ffn cannot run in float64: (B1)/(B2) backpropagated through your own sublayers
        parts = DifferentiableSublayers(block, mask, bias)
        x_leaf = x.clone().requires_grad_(True)
        own_formula(parts, x_leaf, norm)[0].backward(grad_out)
        expect_gradients_match(block, [x], {"mask": mask, "bias": bias}, grad_out, x_leaf.grad, parts.grads(),
                               what + checked_in(dtype, torch.float64, SUBLAYERS), hint)
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), torch.float64)


# ------------------------------------------------------------------ dropout and the sublayers' arguments
@suite.case(0.5, max_examples=4, float64=True)
@given(config=configs, d_ff=d_ffs, norm=norms, seed=seeds, p=st.sampled_from([0.1, 0.3, 0.5]))
def block_dropout_eval(student, config, d_ff, norm, seed, p):
    """in eval mode, TransformerBlock(dropout=p) gives the same y and weights as TransformerBlock(dropout=0)
    """
    kwargs = {"d_model": config["d_model"], "n_heads": config["n_heads"], "d_ff": d_ff, "norm": norm,
              "rope": config["rope"]}

    def check(dtype: torch.dtype) -> None:
        reference = reference_module(ref.block.TransformerBlock, seed, dtype, **kwargs)
        block, block_without = [student_twin(student, BLOCK, reference, dtype, dropout=dropout, **kwargs)
                                for dropout in (p, 0.0)]
        x, mask, _ = block_inputs(config, seed, dtype, masked=True, biased=False)
        y, weights = block(x, mask=mask, return_weights=True)
        expected_y, expected_weights = block_without(x, mask=mask, return_weights=True)
        expect_tensor(expected_y, x.shape, "y with dropout=0")
        hint = f"dropout must be off in eval mode (use nn.Dropout): {FORMULA[norm]}"
        mine = "(compared with your dropout=0 block)"
        expect_close(y, expected_y, f"y in eval mode with dropout={p} {mine}", **EXACT._asdict(), hint=hint)
        expect_close(weights, expected_weights, f"weights in eval mode with dropout={p} {mine}",
                     **EXACT._asdict(), hint=hint)
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), torch.float64)


_DROP_SHAPE = (4, 16, 32)  # B, T, d_model: 2048 entries per sublayer, the rate known to +-0.011 (1 sd)


@suite.case(0.5, max_examples=3, float64=True)
@given(p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def block_dropout_train(student, p, seed):
    """in train mode (pre-norm), each sublayer's output goes through the residual dropout at rate p, scaled by
    1/(1-p)"""
    B, T, d = _DROP_SHAPE
    kwargs = {"d_model": d, "n_heads": 4, "d_ff": d, "dropout": p}

    def check(dtype: torch.dtype) -> None:
        x, mask = randn(seed, B, T, d, dtype=dtype), causal(T)
        atol = 1e-9 if dtype == torch.float64 else TOLERANCES[dtype].atol  # (x + c) - x: c up to rounding
        # One sublayer returns a constant (its out_proj / fc2 bias, whatever its inner dropout does), the
        # other 0: y - x is then that constant after the residual dropout alone.
        for name, (a, f) in (("attention", (1.0, 0.0)), ("feed-forward", (0.0, 3.7))):
            reference = reference_module(ref.block.TransformerBlock, seed, dtype, **kwargs)
            with torch.no_grad():
                for layer, value in ((reference.attn.out_proj, a), (reference.ffn.fc2, f)):
                    layer.weight.zero_()
                    layer.bias.fill_(value)
            block = student_twin(student, BLOCK, reference, dtype, **kwargs)
            kept = expect_tensor(block.eval()(x, mask=mask), x.shape, "y in eval mode") - x
            expect(bool(torch.allclose(kept, torch.full_like(x, a + f), atol=atol)),
                   f"with the {name} sublayer set to return a constant and the other 0 (out_proj and fc2 "
                   f"weights 0, dropout={p}), a pre-norm block in eval mode must give y = x + that constant, "
                   f"and yours does not: check {FORMULA['pre']}, that dropout is off in eval mode, and that "
                   "attn and ffn end with out_proj and fc2")
            block.train()
            student.manual_seed(seed)
            dropped = expect_tensor(block(x, mask=mask), x.shape, "y in train mode") - x
            expect_dropout(dropped, kept, p, f"the {name} sublayer's output (set to a constant)",
                           f"one residual dropout of rate p on each sublayer's output, {FORMULA['pre']}")
    in_runnable_dtype(check, sublayers_probe(student, kwargs, d), torch.float64)
