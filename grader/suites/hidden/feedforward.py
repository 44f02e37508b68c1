"""feedforward.py, hidden cases: FeedForward (F1) against the reference, its gradients and dropout."""
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st
from torch import nn

from ...spec import EXACT, TOLERANCES, Visibility
from ...student import Remote, Student
from .. import Suite
from ..checks import expect, expect_close, expect_dropout, expect_grad_close, expect_tensor
from ..public.feedforward import F1, FFN, activations, widths
from ..strategies import batch_dims, dtypes, randn, seeds
from ..twins import moves_input, moves_parameter, reference_grads, reference_module, student_twin, twins
from .reference import ref

suite = Suite("feedforward", Visibility.HIDDEN)


def _ffn_variants(reference: nn.Module, x: torch.Tensor, activation: str) -> dict[str, torch.Tensor]:
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
                     "nn.GELU() / F.gelu without approximate=\"tanh\")"] = \
                reference.fc2(F.gelu(h, approximate="tanh"))
            variants["activation=\"gelu\" applies ReLU"] = reference.fc2(F.relu(h))
            variants["SiLU (swish) is used instead of GELU"] = reference.fc2(F.silu(h))
        else:
            variants["activation=\"relu\" is ignored (GELU is applied instead)"] = reference.fc2(F.gelu(h))
            variants["activation=\"relu\" applies the tanh-approximate GELU"] = \
                reference.fc2(F.gelu(h, approximate="tanh"))
    return variants


def _ffn_twins(student: Student, d_model: int, d_ff: int, seed: int, dtype: torch.dtype,
               **kwargs) -> tuple[Remote, nn.Module]:
    return twins(student, FFN, ref.feedforward.FeedForward, seed, dtype, d_model=d_model, d_ff=d_ff, **kwargs)


@suite.case(1, max_examples=8, float64=True)
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
    with torch.no_grad():
        expected = reference(x)
    what = f"forward(x), x of shape {tuple(x.shape)}, with activation={activation!r}, d_ff={d_ff}, {dtype}"
    expect_close(ffn(x), expected, what, **TOLERANCES[dtype]._asdict(),
                 hint=f"check {F1} with act = {'exact GELU' if activation == 'gelu' else 'ReLU'}",
                 diagnoses=lambda: _ffn_variants(reference, x, activation))


@suite.case(1, max_examples=8, float64=True)
@given(d_model=widths, d_ff=widths, lead=batch_dims, T=st.integers(1, 4), activation=activations, seed=seeds)
def ffn_gradients(student, d_model, d_ff, lead, T, activation, seed):
    """FeedForward's gradients w.r.t. x and every parameter equal the reference's (float64)"""
    ffn, reference = _ffn_twins(student, d_model, d_ff, seed, torch.float64, activation=activation)
    x = randn(seed, *lead, T, d_model)
    grad_y = randn(seed + 1, *x.shape)
    _, grads, param_grads = ffn.grad([x], grad_outputs=[grad_y], wrt=(0,))
    expected_inputs, expected_params = reference_grads(reference, [x], grad_y)
    hint = f"the gradients follow from {F1} with act = {'exact GELU' if activation == 'gelu' else 'ReLU'}"
    expect_grad_close(grads.get(0), expected_inputs[0], "d(y)/d(x)", hint=hint,
                      moves=moves_input(lambda a: ffn(*a), [x], 0))
    for name, expected in expected_params.items():
        expect_grad_close(param_grads.get(name), expected, f"d(y)/d({name})", hint=hint,
                          moves=moves_parameter(ffn, [x], {}, name))


def _ffn_pair(student: Student, d_model: int, d_ff: int, p: float, seed: int,
              activation: str = "gelu") -> tuple[Remote, Remote]:
    """The student's FeedForward(dropout=p) and FeedForward(dropout=0), float64 and in eval mode,
    holding one reference state dict."""
    reference = reference_module(ref.feedforward.FeedForward, seed, torch.float64,
                                 d_model=d_model, d_ff=d_ff, activation=activation)
    ffn, plain = (student_twin(student, FFN, reference, torch.float64, d_model=d_model, d_ff=d_ff,
                               dropout=dropout, activation=activation) for dropout in (p, 0.0))
    return ffn, plain


@suite.case(0.5, max_examples=6)
@given(d_model=widths, d_ff=widths, T=st.integers(1, 4), p=st.sampled_from([0.1, 0.3, 0.5]),
       activation=activations, seed=seeds)
def ffn_dropout_eval(student, d_model, d_ff, T, p, activation, seed):
    """in eval mode, FeedForward(dropout=p) gives the same output as FeedForward(dropout=0)"""
    ffn, plain = _ffn_pair(student, d_model, d_ff, p, seed, activation)
    x = randn(seed, 2, T, d_model)
    expected = expect_tensor(plain(x), x.shape, "forward(x) with dropout=0")
    expect_close(ffn(x), expected,
                 f"forward(x) in eval mode with dropout={p} (compared with your dropout=0 output)",
                 **EXACT._asdict(), hint="dropout must be off in eval mode: use nn.Dropout "
                                         "(or F.dropout(..., training=self.training))")


_DROP_D, _DROP_SHAPE = 64, (4, 32)  # 8192 entries: the drop rate is known to about +-0.006 (1 sd)


@suite.case(0.5, max_examples=3, float64=True)
@given(p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def ffn_dropout_train(student, p, seed):
    """in train mode, dropout zeroes act(fc1(x)) at rate p and scales the survivors by 1/(1-p), before fc2"""
    d = _DROP_D
    reference = reference_module(ref.feedforward.FeedForward, seed, torch.float64, d_model=d, d_ff=d)
    with torch.no_grad():  # fc2 = identity plus a bias: out - fc2.bias = dropout(act(fc1(x)))
        reference.fc2.weight.copy_(torch.eye(d, dtype=torch.float64))
        reference.fc2.bias.copy_(1.0 + randn(seed + 2, d).abs())
    ffn = student_twin(student, FFN, reference, torch.float64, d_model=d, d_ff=d, dropout=p)
    x = randn(seed, *_DROP_SHAPE, d)
    b = reference.fc2.bias.detach()
    # act(fc1(x)) as the student computes it (eval mode), so that this test is about dropout alone
    a = expect_tensor(ffn(x), x.shape, "forward(x) in eval mode") - b
    student.manual_seed(seed + 1)
    expect(bool(torch.equal(ffn(x) - b, a)),
           f"with dropout={p}, two calls in eval mode give different outputs: "
           "dropout must be off in eval mode (use nn.Dropout)")
    ffn.train()
    student.manual_seed(seed)
    out = expect_tensor(ffn(x), x.shape, "forward(x) in train mode")
    with torch.no_grad():
        h = reference.fc1(x)
    misplaced = {"dropout is applied before the activation (act(dropout(fc1(x))))":
                 (F.gelu(h / (1 - p)), torch.zeros_like(a)),
                 "dropout is applied after fc2 (on the output) instead of between act and fc2":
                 ((a + b) / (1 - p) - b, -b)}
    expect_dropout(out - b, a, p, "act(fc1(x)) (seen through fc2 = identity)", F1, misplaced)
