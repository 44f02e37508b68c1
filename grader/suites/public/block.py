"""block.py, public: TransformerBlock's contract, state dict, ValueError, causality, (B1)/(B2)
composed from the block's own sublayers, its residual dropout, and the sublayers built with the
block's own arguments.

A block is judged on what it adds: the expected output is composed here from the student's own
attn and ffn (called in the worker on the exact tensors the formula gives them) and the block's
own LayerNorm parameters, so a mistake inside MultiHeadAttention or FeedForward costs their
components, not this one. Also the helpers the model suite and the hidden suite build on.
"""
from collections.abc import Callable

import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st
from torch import nn

from ...spec import ACTIVATIONS, EXACT, NORMS, TOLERANCES, Visibility
from ...student import Remote, Student
from .. import Suite
from ..checks import (
    DROPOUT_OFF_IN_EVAL,
    Failed,
    close,
    expect,
    expect_close,
    expect_dropout,
    expect_same_keys,
    expect_tensor,
    expect_value_error,
)
from ..fallback import checked_in, in_runnable_dtype
from ..strategies import causal, dtypes, mha_configs, randn, seeds
from ..through import through
from ..twins import perturb

suite = Suite("block", Visibility.PUBLIC)
BLOCK = "block.TransformerBlock"
MHA, FFN = "attention.MultiHeadAttention", "feedforward.FeedForward"
SUBLAYERS = "MultiHeadAttention or FeedForward"
FORMULA = {
    "pre": "(B1) pre-norm: h = x + dropout(attn(norm1(x))); y = h + dropout(ffn(norm2(h)))",
    "post": "(B2) post-norm: h = norm1(x + dropout(attn(x))); y = norm2(h + dropout(ffn(h)))",
}
norms = st.sampled_from(NORMS)
activations = st.sampled_from(ACTIVATIONS)
d_ffs = st.integers(1, 8)


def perturb_own(remote: Remote, seed: int) -> Remote:
    """Move the student's own floating-point parameters off their init (twins.perturb), so that
    LayerNorm gains and biases matter: with init values norm1 and norm2 are the same function."""
    state = remote.state_dict()
    floats = [name for name, value in state.items() if value.is_floating_point()]
    moved = perturb(nn.ParameterList([state[name] for name in floats]), seed)
    remote.load_state_dict({**state, **{name: p.detach() for name, p in zip(floats, moved, strict=True)}})
    return remote


class Sublayers:
    """What (B1)/(B2) are made of, the block's own: attn and ffn run in the worker on exactly the
    tensors given; norm1 and norm2 applied here with the block's LayerNorm parameters."""

    def __init__(self, block: Remote, mask: torch.Tensor | None, bias: torch.Tensor | None):
        self.state = block.state_dict()
        missing = [key for key in spec_keys() if key.startswith("norm") and key not in self.state]
        expect(not missing, f"TransformerBlock.state_dict() has no {missing}: norm1 and norm2 are "
                            "nn.LayerNorm(d_model) (docs/spec.md)")
        self.attn, self.ffn = block.attribute("attn"), block.attribute("ffn")
        self.mask, self.bias = mask, bias

    def norm(self, name: str, z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(z, z.shape[-1:], self.state[f"{name}.weight"], self.state[f"{name}.bias"])

    def attend(self, z: torch.Tensor, *, masked: bool = True, biased: bool = True) -> tuple:
        """self.attn(z, mask, bias, return_weights=True): (output, weights)."""
        result = self.attn(z, mask=self.mask if masked else None, bias=self.bias if biased else None,
                           return_weights=True)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.Tensor)
                and result[0].shape == z.shape):
            raise Failed("your block's self.attn(z, mask, bias, return_weights=True) does not return "
                         "(y of z's shape, weights): see the attention tests first")
        return result

    def feed(self, z: torch.Tensor) -> torch.Tensor:
        return expect_tensor(self.ffn(z), z.shape, "your block's self.ffn(z) (see the feedforward tests)")


def own_formula(parts: Sublayers, x: torch.Tensor, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, weights) of (B1) or (B2) in eval mode, from the block's own sublayers."""
    if norm == "pre":
        a, weights = parts.attend(parts.norm("norm1", x))
        h = x + a
        return h + parts.feed(parts.norm("norm2", h)), weights
    a, weights = parts.attend(x)
    h = parts.norm("norm1", x + a)
    return parts.norm("norm2", h + parts.feed(h)), weights


class DifferentiableSublayers(Sublayers):
    """Sublayers whose attn and ffn backpropagate through the student's own autograd in the worker,
    and whose norm parameters are leaves here: backward through own_formula leaves every parameter's
    gradient in `grads()`, by the block's parameter names."""

    def __init__(self, block: Remote, mask: torch.Tensor | None, bias: torch.Tensor | None):
        super().__init__(block, mask, bias)
        self.state = {name: value.detach().requires_grad_(True) for name, value in self.state.items()
                      if name.startswith("norm")}
        self.sublayer_grads: dict[str, dict[str, torch.Tensor]] = {"attn": {}, "ffn": {}}

    def attend(self, z: torch.Tensor, *, masked: bool = True, biased: bool = True) -> tuple:
        out = through(self.attn, z, self.sublayer_grads["attn"], mask=self.mask if masked else None,
                      bias=self.bias if biased else None, return_weights=True)
        return out, None

    def feed(self, z: torch.Tensor) -> torch.Tensor:
        return through(self.ffn, z, self.sublayer_grads["ffn"])

    def grads(self) -> dict[str, torch.Tensor | None]:
        own = {name: value.grad for name, value in self.state.items()}
        return own | {f"{sub}.{name}": g for sub, grads in self.sublayer_grads.items()
                      for name, g in grads.items()}


def sublayers_probe(student: Student, config: dict, d_ff: int) -> Callable[[torch.dtype], tuple]:
    """What decides the dtype a block of this config is checked in (fallback.in_runnable_dtype): the attn
    and ffn of the student's own TransformerBlock, run on inputs of a dtype. The block it builds draws its
    own init: the check seeds the worker again before it builds its own."""
    d_model, n_heads = config["d_model"], config["n_heads"]

    def run(wanted: torch.dtype) -> tuple:
        block = student.call(BLOCK, d_model, n_heads, d_ff, rope=config.get("rope", False))
        attn, ffn = (block.attribute(name).to(wanted).eval() for name in ("attn", "ffn"))
        x, mask, bias = block_inputs({"d_model": d_model, "n_heads": n_heads, "B": 1, "T": 3}, 0, wanted,
                                     masked=True, biased=True)
        return attn(x, mask=mask, bias=bias, return_weights=True), ffn(x)
    return run


def alibi_like(n_heads: int, T: int, dtype: torch.dtype) -> torch.Tensor:
    """An ALiBi-shaped bias (n_heads, T, T), -m_h |i - j|, with steeper slopes (1, 1/2, 1/4, ...) than
    ALiBi's so that a bias left out changes the output well beyond the tolerance even for tiny T."""
    slopes = 2.0 ** -torch.arange(n_heads, dtype=torch.float64)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs().to(torch.float64)
    return (-slopes[:, None, None] * distance).to(dtype)


def block_inputs(config: dict, seed: int, dtype: torch.dtype, masked: bool, biased: bool) -> tuple:
    """x (B, T, d_model), the causal mask or None, an ALiBi-like bias or None."""
    B, T, H = config["B"], config["T"], config["n_heads"]
    x = randn(seed, B, T, config["d_model"], dtype=dtype)
    return x, causal(T) if masked else None, alibi_like(H, T, dtype) if biased else None


def describe(config: dict, norm: str, masked: bool, biased: bool) -> str:
    inputs = [", rope"] * config["rope"] + [", causal mask"] * masked + [", ALiBi-like bias"] * biased
    return f"norm={norm!r}, d_model={config['d_model']}, n_heads={config['n_heads']}{''.join(inputs)}"


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


@suite.case(1, max_examples=8, float64=True)
@given(config=mha_configs(), d_ff=d_ffs, norm=norms, dtype=dtypes, seed=seeds)
def block_contract(student, config, d_ff, norm, dtype, seed):
    """TransformerBlock returns y (B, T, d_model) in x's dtype, or (y, weights (B, H, T, T)) with
    return_weights"""
    d_model, n_heads, B, T = config["d_model"], config["n_heads"], config["B"], config["T"]

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
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
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), dtype)


@suite.case(1, max_examples=8)
@given(config=mha_configs(), d_ff=d_ffs, norm=norms)
def block_state_dict(student, config, d_ff, norm):
    """TransformerBlock's state_dict holds exactly attn.{q,k,v,out}_proj, ffn.fc1/fc2 and norm1/norm2, with
    SPEC's shapes"""
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


@suite.case(1, max_examples=8, float64=True)
@given(config=changed_tokens(), d_ff=d_ffs, norm=norms, seed=seeds)
def block_causal(student, config, d_ff, norm, seed):
    """with the causal mask, changing token t leaves the block's outputs before t unchanged (if its own attn
    does)"""
    d_model, n_heads, B, T, t = (config[k] for k in ("d_model", "n_heads", "B", "T", "t"))

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        block = student.call(BLOCK, d_model, n_heads, d_ff, norm=norm, rope=config["rope"])
        block = block.to(dtype).eval()
        x = randn(seed, B, T, d_model, dtype=dtype)
        mask = causal(T)
        x2 = x.clone()
        x2[:, t] += 3.0 * randn(seed + 1, d_model, dtype=dtype).sign()
        y = expect_tensor(block(x, mask=mask), (B, T, d_model), "forward(x)")
        y2 = expect_tensor(block(x2, mask=mask), (B, T, d_model), "forward(x)")
        # outputs that do not see token t agree up to rounding: in float64 far below 1e-9
        atol = 1e-9 if dtype == torch.float64 else TOLERANCES[dtype].atol

        def moved(a: torch.Tensor, b: torch.Tensor) -> list[int]:
            return [i for i in range(t) if not torch.allclose(a[:, i], b[:, i], atol=atol)]

        changed = moved(y, y2)
        if changed:
            parts = Sublayers(block, mask, None)
            attn_in = (parts.norm("norm1", x), parts.norm("norm1", x2)) if norm == "pre" else (x, x2)
            if moved(*(parts.attend(z)[0] for z in attn_in)):
                return  # self.attn itself sees the future under the causal mask: the attention tests say so
        expect(not changed, f"changing token {t} changed the block's outputs at earlier positions "
                            f"{changed}: pass the mask to attn; the feed-forward and norms must act on each "
                            "position alone")
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), torch.float64)


# LayerNorm over 1-3 features is nearly constant (d_model=1: always its bias), which would hide
# most mistakes in post-norm: the formula is checked with d_model >= 4.
configs = mha_configs().filter(lambda config: config["d_model"] >= 4)


@suite.case(2, max_examples=8, float64=True)
@given(config=configs, d_ff=d_ffs, norm=norms, dtype=dtypes, seed=seeds, masked=st.booleans(),
       biased=st.booleans())
def block_formula(student, config, d_ff, norm, dtype, seed, masked, biased):
    """y and weights are (B1) for norm="pre", (B2) for norm="post", composed from the block's own attn, ffn,
    norm1, norm2"""
    wanted = dtype

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        block = student.call(BLOCK, config["d_model"], config["n_heads"], d_ff, norm=norm,
                             rope=config["rope"])
        block = perturb_own(block.to(dtype), seed).eval()
        x, mask, bias = block_inputs(config, seed, dtype, masked, biased)
        y, weights = block(x, mask=mask, bias=bias, return_weights=True)
        expected_y, expected_weights = own_formula(Sublayers(block, mask, bias), x, norm)
        tol = TOLERANCES[dtype]._asdict()
        what = describe(config, norm, masked, biased) + checked_in(dtype, wanted, SUBLAYERS)
        expect_close(y, expected_y, f"y ({what})", **tol,
                     hint=f"{FORMULA[norm]}, with your own self.attn, self.ffn, self.norm1, self.norm2")
        expect_close(weights, expected_weights, f"weights ({what})", **tol,
                     hint="return the weights of self.attn, called on "
                          f"{'norm1(x)' if norm == 'pre' else 'x'} with the block's mask and bias")
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), dtype)


_DROP_SHAPE = (4, 16, 32)  # B, T, d_model: 2048 entries per sublayer, the rate known to +-0.011 (1 sd)
RESIDUAL_DROPOUT = {
    "attention": "the attention sublayer's output goes through self.dropout before the residual sum",
    "feed-forward": "the feed-forward sublayer's output goes through self.dropout before the residual sum"}


def _constant_sublayers(state: dict[str, torch.Tensor], attn_out: float, ffn_out: float) -> dict:
    """The block's state with out_proj and fc2 set to output constants (weights 0, biases the
    constants): attn and ffn then return them whatever their inner dropout does."""
    zeroed = {key: torch.zeros_like(state[key]) for key in ("attn.out_proj.weight", "ffn.fc2.weight")}
    constants = {"attn.out_proj.bias": torch.full_like(state["attn.out_proj.bias"], attn_out),
                 "ffn.fc2.bias": torch.full_like(state["ffn.fc2.bias"], ffn_out)}
    return {**state, **zeroed, **constants}


@suite.case(1, max_examples=3, float64=True)
@example(norm="pre", p=0.5, seed=0)
@example(norm="post", p=0.5, seed=0)
@given(norm=norms, p=st.sampled_from([0.1, 0.3, 0.5]), seed=seeds)
def block_residual_dropout(student, norm, p, seed):
    """TransformerBlock(dropout=p) is your dropout=0 block in eval mode; in train mode each sublayer's
    output goes through the residual dropout (pre-norm: dropped with probability p, kept ones scaled by
    1/(1-p))"""
    B, T, d = _DROP_SHAPE

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        block, plain = (student.call(BLOCK, d, 4, d, dropout=rate, norm=norm).to(dtype) for rate in (p, 0.0))
        block = perturb_own(block, seed)
        state = block.state_dict()
        expect_same_keys(state, dict.fromkeys(spec_keys()), "TransformerBlock.state_dict()")
        plain.load_state_dict(state)
        x, mask = randn(seed, B, T, d, dtype=dtype), causal(T)
        y = expect_tensor(block.eval()(x, mask=mask), x.shape, "y in eval mode")
        expect_close(y, plain.eval()(x, mask=mask), f"y in eval mode with dropout={p} (compared with your "
                     "dropout=0 block)", **EXACT._asdict(), hint=f"{DROPOUT_OFF_IN_EVAL}: {FORMULA[norm]}")
        for name, constants in (("feed-forward", (0.0, 3.7)), ("attention", (1.0, 0.0))):
            block.load_state_dict(_constant_sublayers(state, *constants))
            kept = expect_tensor(block.eval()(x, mask=mask), x.shape, "y in eval mode") - x
            block.train()
            student.manual_seed(seed)
            dropped = expect_tensor(block(x, mask=mask), x.shape, "y in train mode") - x
            where = f"{RESIDUAL_DROPOUT[name]}: {FORMULA[norm]}"
            if norm == "post":  # a LayerNorm follows each sum: only whether anything is dropped shows
                expect(not torch.allclose(dropped, kept, atol=1e-9),
                       f"in train mode with dropout={p}, with the {name} sublayer returning a constant, y "
                       f"equals its eval-mode value: nothing is dropped ({where})")
                continue
            # pre-norm: y - x is the constant sublayer's output after the residual dropout
            expect_dropout(dropped, kept, p, f"the {name} sublayer's output (set to a constant)", where,
                           {"the dropout is applied to the residual sum (x + sublayer) instead of to the "
                            "sublayer's output alone": ((x + kept) / (1 - p) - x, -x)})
    in_runnable_dtype(check, sublayers_probe(student, {"d_model": d, "n_heads": 4}, d), torch.float64)


_ARGS_SHAPE = (2, 6)  # B, T: a dropout of rate >= 0.3 on B * n_heads * T * T >= 72 weights always shows


@suite.case(1, max_examples=4, float64=True)
@example(config={"d_model": 8, "n_heads": 2, "rope": True, "B": 2, "T": 4}, d_ff=6, norm="pre",
         activation="relu", p=0.5, seed=1)
@given(config=configs, d_ff=d_ffs, norm=norms, activation=activations, p=st.sampled_from([0.3, 0.5]),
       seed=seeds)
def block_sublayer_arguments(student, config, d_ff, norm, activation, p, seed):
    """attn is MultiHeadAttention(d_model, n_heads, dropout, rope=rope) and ffn is FeedForward(d_model, d_ff,
    activation=activation), the block's own arguments"""
    d_model, n_heads, rope = config["d_model"], config["n_heads"], config["rope"]

    def check(dtype: torch.dtype) -> None:
        student.manual_seed(seed)
        block = student.call(BLOCK, d_model, n_heads, d_ff, dropout=p, norm=norm, rope=rope,
                             activation=activation)
        block = perturb_own(block.to(dtype), seed)
        x = randn(seed, *_ARGS_SHAPE, d_model, dtype=dtype)
        mask = causal(_ARGS_SHAPE[1])
        built = (f"TransformerBlock(d_model={d_model}, n_heads={n_heads}, d_ff={d_ff}, dropout={p}, "
                 f"rope={rope}")

        def twin(target: str, mine: Remote, *args, **kwargs) -> Remote:
            """target(*args, **kwargs) built by the student's own code, holding `mine`'s weights."""
            other = student.call(target, *args, **kwargs).to(dtype)
            other.load_state_dict(mine.state_dict())
            return other

        def run(module: Remote, train: bool, *inputs: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
            module.train(train)
            student.manual_seed(seed)  # both twins draw the same dropout masks
            return module(*inputs, **kwargs)

        def built_as(target: str, mine: Remote, actual: torch.Tensor, train: bool, inputs: tuple,
                     kwargs: dict, variants: dict[str, dict]) -> str:
            """The variant (of the arguments `target` is built with) whose twin of `mine` gives `actual`; or a
            neutral clause."""
            for sentence, arguments in variants.items():
                if close(actual, run(twin(target, mine, **arguments), train, *inputs, **kwargs), **exact):
                    return sentence
            return f"it differs from your own {target.split('.')[-1]} built with the block's arguments"

        attn, ffn = block.attribute("attn"), block.attribute("ffn")
        expected_attn = twin(MHA, attn, d_model, n_heads, dropout=p, rope=rope)
        exact = EXACT._asdict()
        arguments = {"d_model": d_model, "n_heads": n_heads, "dropout": p, "rope": rope}
        for train, mode in ((False, "eval"), (True, "train")):
            actual, expected = run(attn, train, x, mask=mask), run(expected_attn, train, x, mask=mask)
            if close(actual, expected, **exact):
                continue
            if train:
                wrong = {"self.attn is built without the block's dropout, so it drops no attention weight":
                         {**arguments, "dropout": 0.0}}
            else:  # rope=True needs an even d_head
                wrong = {f"self.attn is built with rope={not rope}, not the block's rope={rope}":
                         {**arguments, "rope": not rope}} if rope or (d_model // n_heads) % 2 == 0 else {}
            found = built_as(MHA, attn, actual, train, (x,), {"mask": mask}, wrong)
            expect_close(actual, expected, f"self.attn's output in {mode} mode (same seed), {built})",
                         **exact,
                         hint=f"{found}: attn must be MultiHeadAttention(d_model, n_heads, dropout=dropout, "
                              "rope=rope)")
        expected_ffn = twin(FFN, ffn, d_model, d_ff, activation=activation)
        actual, expected = run(ffn, False, x), run(expected_ffn, False, x)
        if close(actual, expected, **exact):
            return
        other = ACTIVATIONS[1 - ACTIVATIONS.index(activation)]
        found = built_as(FFN, ffn, actual, False, (x,), {}, {
            f"self.ffn uses {other!r}, not the block's activation={activation!r} (is activation passed on?)":
            {"d_model": d_model, "d_ff": d_ff, "activation": other}})
        expect_close(actual, expected, f"self.ffn's output in eval mode, {built}, activation={activation!r})",
                     **exact, hint=f"{found}: ffn must be FeedForward(d_model, d_ff, dropout, activation)")
    in_runnable_dtype(check, sublayers_probe(student, config, d_ff), torch.float64)
