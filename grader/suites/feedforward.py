"""feedforward.py: FeedForward (F1) (8 points)."""
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ..reference import ref
from . import Suite
from .checks import Failed, expect, expect_close, expect_same_keys, expect_tensor, expect_value_error
from .pairs import reference_grads, twins
from .strategies import batch_dims, dtypes, randn, seeds

suite = Suite("feedforward")
FFN = "feedforward.FeedForward"
F1 = "(F1) forward(x) = fc2(dropout(act(fc1(x))))"

activations = st.sampled_from(["gelu", "relu"])
widths = st.integers(1, 8)


def _spec_state(d_model: int, d_ff: int) -> dict[str, tuple[int, ...]]:
    """FeedForward's state-dict keys and shapes, as SPEC.md fixes them."""
    return {"fc1.weight": (d_ff, d_model), "fc1.bias": (d_ff,),
            "fc2.weight": (d_model, d_ff), "fc2.bias": (d_model,)}


@suite.case(1, public=True)
@given(d_model=widths, d_ff=widths, lead=batch_dims, T=st.integers(1, 4), dtype=dtypes,
       activation=activations, seed=seeds)
def ffn_contract(student, d_model, d_ff, lead, T, dtype, activation, seed):
    """FeedForward has fc1 Linear(d_model, d_ff) and fc2 Linear(d_ff, d_model), keeps any leading dims and the input's dtype"""
    ffn = student.call(FFN, d_model, d_ff, activation=activation)
    state, spec = ffn.state_dict(), _spec_state(d_model, d_ff)
    expect_same_keys(state, spec, "FeedForward.state_dict()")
    for name, shape in spec.items():
        expect(tuple(state[name].shape) == shape,
               f"{name} has shape {tuple(state[name].shape)}, expected {shape} "
               f"(fc1 = nn.Linear(d_model={d_model}, d_ff={d_ff}), fc2 = nn.Linear(d_ff, d_model))")
    ffn.to(dtype).eval()
    x = randn(seed, *lead, T, d_model, dtype=dtype)
    y = expect_tensor(ffn(x), x.shape, f"forward(x) with x of shape {tuple(x.shape)}")
    expect(y.dtype == dtype, f"x is {dtype} but forward(x) is {y.dtype}: compute in the input's dtype")


@suite.case(1, public=True)
@given(activation=st.sampled_from(["tanh", "silu", "sigmoid", "gelu_tanh", "leaky_relu"]), d_model=widths)
def ffn_value_error(student, activation, d_model):
    """FeedForward raises ValueError naming `activation` for anything but "gelu" or "relu\""""
    expect_value_error(lambda: student.call(FFN, d_model, 2 * d_model, activation=activation),
                       f"FeedForward({d_model}, {2 * d_model}, activation={activation!r})", ("activation",))


@suite.case(1, public=True)
@given(d_model=widths, d_ff=widths, B=st.integers(1, 3), T=st.integers(2, 5), seed=seeds, data=st.data())
def ffn_position_wise(student, d_model, d_ff, B, T, seed, data):
    """FeedForward is position-wise: changing one position's input changes that position's output only"""
    b, t = data.draw(st.integers(0, B - 1), label="b"), data.draw(st.integers(0, T - 1), label="t")
    student.call("torch.manual_seed", seed)
    ffn = student.call(FFN, d_model, d_ff).to(torch.float64).eval()
    x = randn(seed, B, T, d_model)
    x2 = x.clone()
    x2[b, t] += 3.0 * randn(seed + 1, d_model).sign()
    y, y2 = expect_tensor(ffn(x), x.shape, "forward(x)"), expect_tensor(ffn(x2), x.shape, "forward(x)")
    changed = (y - y2).abs().amax(-1) > 1e-9
    others = [tuple(i) for i in changed.nonzero().tolist() if tuple(i) != (b, t)]
    expect(not others, f"changing x[{b}, {t}] changed the outputs at (batch, position) {others[:5]}: "
                       "each position must go through fc1, act and fc2 on its own (no mixing across tokens)")
    expect(bool(changed[b, t]), f"changing x[{b}, {t}] left forward(x)[{b}, {t}] unchanged: "
                                "does the output depend on the input at that position?")


def _ffn_variants(reference, x: torch.Tensor, activation: str) -> dict[str, torch.Tensor]:
    """What classic mistakes return (computed here, never shown)."""
    with torch.no_grad():
        h = reference.fc1(x)
        variants = {
            "no activation is applied between fc1 and fc2": reference.fc2(h),
            "the activation is applied after fc2 instead of between fc1 and fc2":
                F.gelu(reference.fc2(h)) if activation == "gelu" else F.relu(reference.fc2(h)),
        }
        if activation == "gelu":
            variants["GELU uses the tanh approximation (SPEC asks for the exact, erf-based GELU: "
                     "nn.GELU() / F.gelu without approximate=\"tanh\")"] = reference.fc2(F.gelu(h, approximate="tanh"))
            variants["activation=\"gelu\" applies ReLU"] = reference.fc2(F.relu(h))
            variants["SiLU (swish) is used instead of GELU"] = reference.fc2(F.silu(h))
        else:
            variants["activation=\"relu\" is ignored (GELU is applied instead)"] = reference.fc2(F.gelu(h))
            variants["activation=\"relu\" applies the tanh-approximate GELU"] = \
                reference.fc2(F.gelu(h, approximate="tanh"))
    return variants


def _ffn_twins(student, d_model: int, d_ff: int, seed: int, dtype: torch.dtype, **kwargs):
    return twins(student, FFN, ref.feedforward.FeedForward, seed, dtype, d_model=d_model, d_ff=d_ff, **kwargs)


@suite.case(2)
@settings(max_examples=8)
@example(d_model=4, d_ff=8, lead=(2,), T=3, dtype=torch.float64, activation="gelu", seed=1)
@example(d_model=6, d_ff=8, lead=(), T=4, dtype=torch.float32, activation="relu", seed=2)
@example(d_model=5, d_ff=7, lead=(1, 2), T=2, dtype=torch.float32, activation="gelu", seed=3)
@example(d_model=3, d_ff=8, lead=(2,), T=4, dtype=torch.float64, activation="relu", seed=4)
@given(d_model=widths, d_ff=widths, lead=batch_dims, T=st.integers(1, 4), dtype=dtypes,
       activation=activations, seed=seeds)
def ffn_matches_reference(student, d_model, d_ff, lead, T, dtype, activation, seed):
    """FeedForward with the reference's weights gives the reference's output (F1), for gelu and relu"""
    ffn, reference = _ffn_twins(student, d_model, d_ff, seed, dtype, activation=activation)
    x = 2.0 * randn(seed, *lead, T, d_model, dtype=dtype)  # wide enough to tell the GELU variants apart
    x = torch.cat([x, -0.5 * x], dim=-2)  # fc1(x) of both signs, so that ReLU and no activation differ
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    with torch.no_grad():
        expected = reference(x)
    what = f"forward(x) with activation={activation!r} (d_model={d_model}, d_ff={d_ff}, {str(dtype)[6:]})"
    y = ffn(x)
    try:
        expect_close(y, expected, what, **tol)
    except Failed:  # only now compute what the classic mistakes give
        expect_close(y, expected, what, **tol,
                     hint=f"check {F1} with act = {'exact GELU' if activation == 'gelu' else 'ReLU'}",
                     diagnoses=_ffn_variants(reference, x, activation))


@suite.case(1)
@settings(max_examples=8)
@given(d_model=widths, d_ff=widths, lead=batch_dims, T=st.integers(1, 4), activation=activations, seed=seeds)
def ffn_gradients(student, d_model, d_ff, lead, T, activation, seed):
    """FeedForward's gradients w.r.t. x and every parameter equal the reference's (float64)"""
    ffn, reference = _ffn_twins(student, d_model, d_ff, seed, torch.float64, activation=activation)
    x = randn(seed, *lead, T, d_model)
    grad_y = randn(seed + 1, *x.shape)
    _, grads, param_grads = ffn.grad([x], grad_outputs=[grad_y], wrt=(0,))
    expected_inputs, expected_params = reference_grads(reference, [x], grad_y)
    expect(grads.get(0) is not None, "no gradient reaches x: is the graph cut (.detach(), .item(), numpy)?")
    hint = f"is {F1} computed with torch operations only (nothing detached), with the exact GELU or ReLU?"
    expect_close(grads[0], expected_inputs[0], "d(y)/d(x)", atol=1e-8, rtol=1e-6, hint=hint)
    for name, expected in expected_params.items():
        expect(param_grads.get(name) is not None, f"parameter {name} gets no gradient")
        expect_close(param_grads[name], expected, f"d(y)/d({name})", atol=1e-8, rtol=1e-6, hint=hint)


def _ffn_pair(student, d_model: int, d_ff: int, p: float, seed: int, activation: str = "gelu"):
    """The student's FeedForward(dropout=p) and FeedForward(dropout=0), float64 and in eval mode,
    sharing one state dict (made here)."""
    torch.manual_seed(seed)
    state = ref.feedforward.FeedForward(d_model, d_ff, activation=activation).double().state_dict()
    modules = []
    for dropout in (p, 0.0):
        module = student.call(FFN, d_model, d_ff, dropout=dropout, activation=activation)
        module.to(torch.float64)
        module.load_state_dict(state)
        modules.append(module.eval())
    return modules[0], modules[1]


@suite.case(1)
@settings(max_examples=6)
@given(d_model=widths, d_ff=widths, T=st.integers(1, 4), p=st.sampled_from([0.1, 0.3, 0.5]),
       activation=activations, seed=seeds)
def ffn_dropout_eval(student, d_model, d_ff, T, p, activation, seed):
    """in eval mode, FeedForward(dropout=p) gives the same output as FeedForward(dropout=0)"""
    ffn, plain = _ffn_pair(student, d_model, d_ff, p, seed, activation)
    x = randn(seed, 2, T, d_model)
    expected = expect_tensor(plain(x), x.shape, "forward(x) with dropout=0")
    expect_close(ffn(x), expected, f"forward(x) in eval mode with dropout={p} (compared with your dropout=0 output)",
                 atol=1e-12, rtol=1e-12,
                 hint="dropout must be off in eval mode: use nn.Dropout (or F.dropout(..., training=self.training))")


_DROP_D, _DROP_SHAPE = 64, (4, 32)  # 8192 entries: the drop rate is known to about +-0.006 (1 sd)


@suite.case(1)
@settings(max_examples=3)
@given(p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def ffn_dropout_train(student, p, seed):
    """in train mode, dropout zeroes act(fc1(x)) at rate p and scales the survivors by 1/(1-p), before fc2"""
    d = _DROP_D
    torch.manual_seed(seed)
    reference = ref.feedforward.FeedForward(d, d).double()
    with torch.no_grad():  # fc2 = identity plus a bias: out - fc2.bias = dropout(act(fc1(x)))
        reference.fc2.weight.copy_(torch.eye(d, dtype=torch.float64))
        reference.fc2.bias.copy_(1.0 + randn(seed + 2, d).abs())
    ffn = student.call(FFN, d, d, dropout=p)
    ffn.to(torch.float64)
    ffn.load_state_dict(reference.state_dict())
    x = randn(seed, *_DROP_SHAPE, d)
    b = reference.fc2.bias.detach()
    # act(fc1(x)) as the student computes it (eval mode), so that this test is about dropout alone
    a = expect_tensor(ffn.eval()(x), x.shape, "forward(x) in eval mode") - b
    student.call("torch.manual_seed", seed + 1)
    expect(bool(torch.equal(ffn(x) - b, a)), f"with dropout={p}, two calls in eval mode give different outputs: "
                                             "dropout must be off in eval mode (use nn.Dropout)")
    ffn.train()
    student.call("torch.manual_seed", seed)
    out = expect_tensor(ffn(x), x.shape, "forward(x) in train mode")
    expect(bool(torch.isfinite(out).all()), f"forward(x) in train mode with dropout={p} has NaN or inf")
    with torch.no_grad():
        h = reference.fc1(x)
    r = out - b
    informative = a.abs() > 1e-3

    def share(kept: torch.Tensor, dropped: torch.Tensor) -> float:
        """The fraction of informative entries equal to `kept` or to `dropped`."""
        hit = ((r - kept).abs() <= 1e-6 * (1 + kept.abs())) | ((r - dropped).abs() <= 1e-6 * (1 + dropped.abs()))
        return hit[informative].double().mean().item()

    zero = torch.zeros_like(a)
    correct = share(a / (1 - p), zero)
    if correct < 0.99:
        mistakes = {
            "dropout is not active in train mode (or ignores the dropout argument)": share(a, a),
            "the survivors are not scaled by 1/(1-p)": share(a, zero),
            "the survivors are multiplied by (1-p) instead of divided by it": share(a * (1 - p), zero),
            "dropout is applied before the activation (act(dropout(fc1(x))))": share(F.gelu(h / (1 - p)), zero),
            "dropout is applied after fc2 (on the output) instead of between act and fc2":
                share((a + b) / (1 - p) - b, -b),
        }
        sentence, fit = max(mistakes.items(), key=lambda item: item[1])
        if fit >= 0.99:
            raise Failed(f"in train mode with dropout={p}, the output matches what you get when {sentence}: {F1}")
        kept = informative & (r.abs() > 1e-6)
        ratio = r[kept] / a[kept]
        if kept.any() and (ratio - ratio.mean()).abs().max() < 1e-6 * ratio.mean().abs():
            scale = ratio.mean().item()
            raise Failed(f"in train mode with dropout={p}, the surviving entries of act(fc1(x)) are scaled by "
                         f"{scale:.4g} = 1/(1-{1 - 1 / scale:.3g}), expected 1/(1-p) = {1 / (1 - p):.4g}: "
                         f"is nn.Dropout built with p=dropout? {F1}")
        raise Failed(f"in train mode with dropout={p}, {1 - correct:.0%} of the entries of act(fc1(x)) are neither "
                     f"dropped (0) nor scaled by 1/(1-p) (checked with fc2 = identity): {F1}")
    rate = (r[informative].abs() <= 1e-6).double().mean().item()
    expect(abs(rate - p) < 0.05, f"in train mode with dropout={p}, {rate:.1%} of the entries of act(fc1(x)) are "
                                 f"zeroed, expected about {p:.0%}: is nn.Dropout built with p=dropout?")
