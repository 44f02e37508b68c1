"""block.py, public: TransformerBlock's contract, state dict, ValueError and causality (4 points)."""
import torch
from hypothesis import given
from hypothesis import strategies as st

from ...spec import NORMS, Visibility
from .. import Suite
from ..checks import expect, expect_same_keys, expect_tensor, expect_value_error
from ..strategies import causal, dtypes, mha_configs, randn, seeds

suite = Suite("block", Visibility.PUBLIC)
BLOCK = "block.TransformerBlock"
norms = st.sampled_from(NORMS)
d_ffs = st.integers(1, 8)


def spec_keys() -> list[str]:
    """TransformerBlock's state-dict keys as docs/spec.md fixes them (MultiHeadAttention with bias=True)."""
    return ([f"attn.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")]
            + [f"ffn.{fc}.{w}" for fc in ("fc1", "fc2") for w in ("weight", "bias")]
            + [f"{n}.{w}" for n in ("norm1", "norm2") for w in ("weight", "bias")])


@st.composite
def changed_tokens(draw: st.DrawFn) -> dict:
    """A block config with T >= 2 (one token has no earlier output to keep) and the token t < T to change."""
    config = draw(mha_configs().filter(lambda config: config["T"] >= 2))
    return {**config, "t": draw(st.integers(0, config["T"] - 1))}


@suite.case(1, max_examples=8)
@given(config=mha_configs(), d_ff=d_ffs, norm=norms, dtype=dtypes, seed=seeds)
def block_contract(student, config, d_ff, norm, dtype, seed):
    """TransformerBlock returns y (B, T, d_model) in x's dtype, or (y, weights (B, H, T, T)) with return_weights"""  # noqa: E501
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]
    student.call("torch.manual_seed", seed)
    block = student.call(BLOCK, d_model, n_heads, d_ff, norm=norm, rope=config["rope"]).to(dtype).eval()
    x = randn(seed, B, T, d_model, dtype=dtype)
    mask = causal(T)
    y = expect_tensor(block(x, mask=mask), (B, T, d_model), "forward(x)")
    expect(y.dtype == dtype, f"x is {dtype} but forward(x) is {y.dtype}: compute in the input's dtype")
    out = block(x, mask=mask, return_weights=True)
    expect(isinstance(out, tuple) and len(out) == 2,
           f"forward(x, return_weights=True) should return a pair (y, weights), got {type(out).__name__}")
    y2, weights = out
    expect_tensor(y2, (B, T, d_model), "y from forward(x, return_weights=True)")
    expect_tensor(weights, (B, n_heads, T, T), "weights from forward(x, return_weights=True)")
    expect(bool(torch.allclose(y, y2)), "forward(x) and forward(x, return_weights=True)[0] differ: "
                                        "return_weights must only add the attention weights")


@suite.case(1, max_examples=8)
@given(config=mha_configs(), d_ff=d_ffs, norm=norms)
def block_state_dict(student, config, d_ff, norm):
    """TransformerBlock's state_dict holds exactly attn.{q,k,v,out}_proj, ffn.fc1/fc2 and norm1/norm2, with SPEC's shapes"""  # noqa: E501
    d_model, n_heads = config["d_model"], config["n_heads"]
    block = student.call(BLOCK, d_model, n_heads, d_ff, norm=norm, rope=config["rope"])
    state = block.state_dict()
    expect_same_keys(state, dict.fromkeys(spec_keys()), "TransformerBlock.state_dict()")
    shapes = {"ffn.fc1.weight": (d_ff, d_model), "ffn.fc1.bias": (d_ff,),
              "ffn.fc2.weight": (d_model, d_ff), "ffn.fc2.bias": (d_model,),
              "norm1.weight": (d_model,), "norm2.weight": (d_model,),
              "attn.q_proj.weight": (d_model, d_model)}
    for name, shape in shapes.items():
        expect(tuple(state[name].shape) == shape,
               f"{name} has shape {tuple(state[name].shape)}, expected {shape} (d_model={d_model}, "
               f"d_ff={d_ff}): attn = MultiHeadAttention(d_model, n_heads), "
               "ffn = FeedForward(d_model, d_ff), norm1/norm2 = nn.LayerNorm(d_model)")


@suite.case(1)
@given(norm=st.sampled_from(["mid", "none", "rms", "sandwich", "layer"]))
def block_value_error(student, norm):
    """TransformerBlock raises ValueError naming `norm` for anything but "pre" or "post\""""
    expect_value_error(lambda: student.call(BLOCK, 8, 2, 16, norm=norm),
                       f"TransformerBlock(8, 2, 16, norm={norm!r})", ("norm",))


@suite.case(1, max_examples=8)
@given(config=changed_tokens(), d_ff=d_ffs, norm=norms, seed=seeds)
def block_causal(student, config, d_ff, norm, seed):
    """with the causal mask, changing token t leaves the block's outputs before t unchanged"""
    d_model, n_heads, B, T, t = (config[k] for k in ("d_model", "n_heads", "B", "T", "t"))
    student.call("torch.manual_seed", seed)
    block = student.call(BLOCK, d_model, n_heads, d_ff, norm=norm, rope=config["rope"])
    block = block.to(torch.float64).eval()
    x = randn(seed, B, T, d_model)
    mask = causal(T)
    x2 = x.clone()
    x2[:, t] += 3.0 * randn(seed + 1, d_model).sign()
    y = expect_tensor(block(x, mask=mask), (B, T, d_model), "forward(x)")
    y2 = expect_tensor(block(x2, mask=mask), (B, T, d_model), "forward(x)")
    # float64: outputs that do not see token t agree up to rounding, far below 1e-9
    changed = [i for i in range(t) if not torch.allclose(y[:, i], y2[:, i], atol=1e-9)]
    expect(not changed, f"changing token {t} changed the block's outputs at earlier positions {changed}: "
                        "pass the mask to attn; the feed-forward and norms must act on each position alone")
