"""feedforward.py, public cases: FeedForward's (F1) contract, without the reference.

(F1)'s values are computed here from the definition, with plain torch, on the module's own weights.
"""
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st

from ...spec import ACTIVATIONS, EXACT, TOLERANCES, Visibility
from .. import Suite
from ..checks import (
    DROPOUT_OFF_IN_EVAL,
    expect,
    expect_close,
    expect_dropout,
    expect_same_keys,
    expect_tensor,
    expect_value_error,
)
from ..strategies import batch_dims, dtypes, randn, seeds

suite = Suite("feedforward", Visibility.PUBLIC)
FFN = "feedforward.FeedForward"
F1 = "(F1) forward(x) = fc2(dropout(act(fc1(x))))"

activations = st.sampled_from(ACTIVATIONS)
widths = st.integers(1, 8)


def _spec_state(d_model: int, d_ff: int) -> dict[str, tuple[int, ...]]:
    """FeedForward's state-dict keys and shapes, as docs/spec.md fixes them."""
    return {"fc1.weight": (d_ff, d_model), "fc1.bias": (d_ff,),
            "fc2.weight": (d_model, d_ff), "fc2.bias": (d_model,)}


@suite.case(1, float64=True)
@given(d_model=widths, d_ff=widths, lead=batch_dims, T=st.integers(1, 4), dtype=dtypes,
       activation=activations, seed=seeds)
def ffn_contract(student, d_model, d_ff, lead, T, dtype, activation, seed):
    """FeedForward has fc1 Linear(d_model, d_ff) and fc2 Linear(d_ff, d_model), keeps any leading dims and the
    input's dtype"""
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


@suite.case(1)
@given(activation=st.sampled_from(["tanh", "silu", "sigmoid", "gelu_tanh", "leaky_relu"]), d_model=widths)
def ffn_value_error(student, activation, d_model):
    """FeedForward raises ValueError naming `activation` for anything but "gelu" or "relu\""""
    expect_value_error(lambda: student.call(FFN, d_model, 2 * d_model, activation=activation),
                       f"FeedForward({d_model}, {2 * d_model}, activation={activation!r})", ("activation",))


@suite.case(1, float64=True)
@given(d_model=widths, d_ff=widths, B=st.integers(1, 3), T=st.integers(2, 5), seed=seeds, data=st.data())
def ffn_position_wise(student, d_model, d_ff, B, T, seed, data):
    """FeedForward is position-wise: changing one position's input changes that position's output only"""
    b, t = data.draw(st.integers(0, B - 1), label="b"), data.draw(st.integers(0, T - 1), label="t")
    student.manual_seed(seed)
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


ACT = {"gelu": F.gelu, "relu": F.relu}
"""The contract's activations: F.gelu's default is the exact (erf) GELU."""


@suite.case(1, max_examples=6, float64=True)
@example(d_model=3, d_ff=5, B=2, activation="gelu", seed=0)
@example(d_model=3, d_ff=5, B=2, activation="relu", seed=0)
@given(d_model=widths, d_ff=widths, B=st.integers(1, 3), activation=activations, seed=seeds)
def ffn_matches_definition(student, d_model, d_ff, B, activation, seed):
    """FeedForward gives (F1), computed here from its own fc1 and fc2 weights, for gelu (exact) and relu
    (float64)"""
    student.manual_seed(seed)
    ffn = student.call(FFN, d_model, d_ff, activation=activation).to(torch.float64).eval()
    state = ffn.state_dict()
    expect_same_keys(state, _spec_state(d_model, d_ff), "FeedForward.state_dict()")
    x = 3.0 * randn(seed, B, 3, d_model)  # pre-activations of order 1 to 3, where GELU is far from linear
    hidden = ACT[activation](F.linear(x, state["fc1.weight"], state["fc1.bias"]))
    expected = F.linear(hidden, state["fc2.weight"], state["fc2.bias"])
    expect_close(ffn(x), expected, f"FeedForward({d_model}, {d_ff}, activation={activation!r}) in eval mode",
                 **TOLERANCES[torch.float64]._asdict(),
                 hint=f"{F1}, act being {'the exact GELU (erf form)' if activation == 'gelu' else 'ReLU'} "
                      "here: look at which activation is applied, and where")


@suite.case(1, max_examples=3, float64=True)
@example(p=0.5, seed=0)
@given(p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def ffn_dropout(student, p, seed):
    """FeedForward(dropout=p) is your dropout=0 module in eval mode; in train mode it drops each entry of
    act(fc1(x)) with probability p and scales the kept ones by 1/(1-p), before fc2 (float64, gelu)"""
    d, shape = 32, (4, 16)  # 2048 entries: the rate is known to about +-0.011 (1 sd)
    ffn, plain = (student.call(FFN, d, d, dropout=rate).to(torch.float64) for rate in (p, 0.0))
    state = ffn.state_dict()
    expect_same_keys(state, _spec_state(d, d), "FeedForward.state_dict()")
    # fc2 = the identity plus a bias c: y - c = dropout(act(fc1(x))), whatever happens inside
    c = 1.0 + randn(seed + 2, d).abs()
    state = {"fc1.weight": randn(seed, d, d) / d ** 0.5, "fc1.bias": randn(seed + 1, d),
             "fc2.weight": torch.eye(d, dtype=torch.float64), "fc2.bias": c}
    ffn.load_state_dict(state)
    plain.load_state_dict(state)
    x = randn(seed + 3, *shape, d)
    y = expect_tensor(ffn.eval()(x), x.shape, "forward(x) in eval mode")
    expect_close(y, plain.eval()(x), f"forward(x) in eval mode with dropout={p} (compared with your "
                 "dropout=0 module)", **EXACT._asdict(), hint=DROPOUT_OFF_IN_EVAL)
    ffn.train()
    student.manual_seed(seed)
    dropped = expect_tensor(ffn(x), x.shape, "forward(x) in train mode") - c
    h = F.linear(x, state["fc1.weight"], state["fc1.bias"])
    expect_dropout(dropped, y - c, p, "act(fc1(x)) (seen through fc2 = identity)",
                   f"the dropout acts between the activation and fc2: {F1}",
                   {"the dropout is applied to fc2's output instead of to act(fc1(x))": (y / (1 - p) - c, -c),
                    "the dropout is applied to fc1's output, before the activation": (F.gelu(h / (1 - p)),
                                                                                       torch.zeros_like(h))})
