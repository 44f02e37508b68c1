"""model.py, public: TinyTransformerLM's contract, (M1) composed from the model's own parts,
causality and training.

A model is judged on what it adds: the expected logits are composed here from the model's own
embedding, final norm and lm_head parameters and the student's own TransformerBlock, causal_mask,
sinusoidal_encoding and alibi_bias (run in the worker), so a mistake inside a block, the attention
or an encoding costs its own component. The training run uses the whole stack (integration).

Also the shared pieces the hidden suite builds on: the config strategy, the state-dict keys
docs/spec.md allows, the composition and the training runs.
"""
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from ...spec import (
    ACTIVATIONS,
    EXACT,
    FLOAT32_TABLE_TOLERANCE,
    IGNORE_INDEX,
    MODEL_DEFAULTS,
    NORMS,
    POS_ENCODINGS,
    TOLERANCES,
    Visibility,
)
from ...student import Remote, Student
from ...tasks import RECIPES, Recipe
from .. import Suite
from ..checks import Failed, expect, expect_close, expect_tensor, expect_value_error, shape_of
from ..fallback import in_runnable_dtype
from ..strategies import causal, dtypes, randn, seeds
from ..through import through
from .block import BLOCK, block_inputs, perturb_own

suite = Suite("model", Visibility.PUBLIC)
LM = "model.TinyTransformerLM"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


@st.composite
def lm_configs(draw: st.DrawFn, min_len: int = 1) -> dict:
    """A tiny TinyTransformerLM config and a batch size B and length min_len <= T <= max_len.
    d_model is even (sinusoidal and rope need it) and >= 4 (a LayerNorm over 2 features hides
    most mistakes)."""
    n_heads = draw(st.integers(1, 3))
    max_len = draw(st.integers(max(min_len, 2), 7))
    return {
        "model": {
            "vocab_size": draw(st.integers(3, 9)),
            "d_model": n_heads * draw(st.sampled_from([2, 4] if n_heads > 1 else [4, 6])),
            "n_heads": n_heads, "n_layers": draw(st.integers(1, 3)), "d_ff": draw(st.integers(1, 12)),
            "max_len": max_len, "norm": draw(st.sampled_from(NORMS)),
            "pos_encoding": draw(st.sampled_from(POS_ENCODINGS)),
        },
        "B": draw(st.integers(1, 3)), "T": draw(st.integers(min_len, max_len)),
    }


@st.composite
def changed_token_configs(draw: st.DrawFn) -> dict:
    """An lm_configs draw with T >= 2 and a position 1 <= t < T to change (so positions before it exist)."""
    config = draw(lm_configs(min_len=2))
    return {**config, "t": draw(st.integers(1, config["T"] - 1))}


def changed(config: dict, **changes: object) -> dict:
    """config with some keyword arguments replaced."""
    return {**config, **changes}


def describe(config: dict) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in config.items())
    return f"TinyTransformerLM({args})"


def tokens(seed: int, vocab_size: int, B: int, T: int) -> torch.Tensor:
    return torch.randint(vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def build(student: Student, config: dict, seed: int) -> Remote:
    """The student's TinyTransformerLM(**config), built after torch.manual_seed(seed) in the worker."""
    student.manual_seed(seed)
    return student.call(LM, **config)


# ------------------------------------------------------------------ state-dict keys (SPEC model.py)
def _spec_keys(config: dict) -> dict[str, tuple | None]:
    """Every state-dict key docs/spec.md's model.py section allows, with its shape where the model
    fixes it."""
    V, d, L = config["vocab_size"], config["d_model"], config["n_layers"]
    keys: dict[str, tuple | None] = {"tok_emb.weight": (V, d), "lm_head.weight": (V, d)}
    if config["pos_encoding"] == "learned":
        keys["pos_emb.weight"] = (config["max_len"], d)
    if config["norm"] == "pre":
        keys["norm_f.weight"] = keys["norm_f.bias"] = (d,)
    for i in range(L):
        for name in (*(f"attn.{p}" for p in PROJECTIONS), "ffn.fc1", "ffn.fc2", "norm1", "norm2"):
            keys[f"blocks.{i}.{name}.weight"] = keys[f"blocks.{i}.{name}.bias"] = None
    return keys


def _key_hints(config: dict, missing: list[str], extra: list[str]) -> list[str]:
    hints = []
    if any(k.startswith("norm_f.") for k in extra) and config["norm"] == "post":
        hints.append("a post-norm model has no final norm_f (each block already ends in norm2)")
    if any(k.startswith("norm_f.") for k in missing):
        hints.append("the pre-norm model needs norm_f = nn.LayerNorm(d_model) before lm_head")
    if any(k.startswith("pos_emb.") for k in extra):
        hints.append('pos_emb exists only for pos_encoding="learned"')
    if any(k.startswith("pos_emb.") for k in missing):
        hints.append('pos_encoding="learned" needs pos_emb = nn.Embedding(max_len, d_model)')
    if "lm_head.bias" in extra:
        hints.append("lm_head is nn.Linear(d_model, vocab_size, bias=False)")
    if any(not k.endswith((".weight", ".bias")) for k in extra):
        hints.append("a buffer (a cached sinusoidal table, a mask) must be registered with persistent=False")
    if any(k.startswith("blocks.") for k in missing + extra) and not hints:
        hints.append("blocks is an nn.ModuleList of n_layers TransformerBlock (attn, ffn, norm1, norm2)")
    return hints


def expect_spec_keys(state: dict, config: dict) -> None:
    """state's keys are exactly docs/spec.md's for this config, with the model-level shapes it fixes."""
    expected = _spec_keys(config)
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        hints = "; ".join(_key_hints(config, missing, extra))
        raise Failed(f"{describe(config)}.state_dict() keys differ from docs/spec.md: "
                     f"missing {missing or 'none'}, unexpected {extra or 'none'}"
                     + (f" ({hints})" if hints else ""))
    for key, shape in expected.items():
        if shape is not None:
            expect(isinstance(state[key], torch.Tensor) and tuple(state[key].shape) == shape,
                   f"{describe(config)}: {key} has shape {shape_of(state[key])}, expected {shape}")


# ------------------------------------------------------------------ (M1) from the model's own parts
M1_HINT = ("check (M1) step by step: drop(tok_emb + positions), every block with the causal mask (and "
           "the ALiBi bias), norm_f for pre-norm only, lm_head")


def tolerance(config: dict, dtype: torch.dtype) -> dict:
    if dtype == torch.float64 and config["pos_encoding"] == "sinusoidal":
        # (P1)'s table may be computed in float32 or float64: they differ by ~1e-7 (docs/spec.md, Tolerances).
        return FLOAT32_TABLE_TOLERANCE._asdict()
    return TOLERANCES[dtype]._asdict()


class OwnParts:
    """(M1)'s parts, the student's own: the model's tok_emb, pos_emb, norm_f and lm_head parameters
    (applied here); its blocks and the student's causal_mask, sinusoidal_encoding and alibi_bias (run
    in the worker). The blocks run in the model's mode: set it with model.train(...) first."""

    def __init__(self, student: Student, model: Remote, config: dict, dtype: torch.dtype):
        self.student, self.dtype = student, dtype
        self.config = {**MODEL_DEFAULTS, **config}
        self.state = model.state_dict()
        expect_spec_keys(self.state, config)
        blocks = model.attribute("blocks")
        self.blocks = [blocks.method("__getitem__", layer) for layer in range(config["n_layers"])]

    def positions(self, T: int) -> torch.Tensor | None:
        """The rows 0..T-1 added to the token embeddings: your sinusoidal_encoding's, pos_emb's, or none."""
        d, pos = self.config["d_model"], self.config["pos_encoding"]
        if pos == "sinusoidal":
            table = self.student.call("positional.sinusoidal_encoding", T, d)
            return expect_tensor(table, (T, d), f"your sinusoidal_encoding({T}, {d})").to(self.dtype)
        return self.state["pos_emb.weight"][:T] if pos == "learned" else None

    def mask(self, T: int) -> torch.Tensor:
        return expect_tensor(self.student.call("attention.causal_mask", T), (T, T), f"your causal_mask({T})")

    def bias(self, T: int) -> torch.Tensor | None:
        if self.config["pos_encoding"] != "alibi":
            return None
        H = self.config["n_heads"]
        bias = self.student.call("positional.alibi_bias", H, T)
        return expect_tensor(bias, (H, T, T), f"your alibi_bias({H}, {T})").to(self.dtype)

    def drop(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        # the tests run train mode with dropout 0 or 1 only, where dropout draws nothing
        return F.dropout(x, self.config["dropout"], training=training)

    def run_blocks(self, x: torch.Tensor, mask: torch.Tensor | None,
                   bias: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        per_layer: list[torch.Tensor] = []
        for own_block in self.blocks:
            out = own_block(x, mask=mask, bias=bias, return_weights=True)
            if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)
                    and out[0].shape == x.shape):
                raise Failed("your TransformerBlock(x, mask, bias, return_weights=True) does not return "
                             "(y of x's shape, weights): see the block tests first")
            x = out[0]
            per_layer.append(out[1])
        return x, per_layer

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """norm_f (pre-norm only), then lm_head."""
        if self.config["norm"] == "pre":
            x = F.layer_norm(x, x.shape[-1:], self.state["norm_f.weight"], self.state["norm_f.bias"])
        return F.linear(x, self.state["lm_head.weight"])

    def __call__(self, idx: torch.Tensor, training: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(logits, weights) of (M1)."""
        T = idx.size(1)
        x = F.embedding(idx, self.state["tok_emb.weight"])
        pos = self.positions(T)
        x = self.drop(x if pos is None else x + pos, training)
        x, weights = self.run_blocks(x, self.mask(T), self.bias(T))
        return self.head(x), weights


class DifferentiableParts(OwnParts):
    """OwnParts whose blocks backpropagate through the student's own autograd in the worker, and whose
    embedding, norm_f and lm_head parameters are leaves here: backward through (M1) leaves every
    parameter's gradient in `grads()`, by the model's parameter names. Eval mode only."""

    def __init__(self, student: Student, model: Remote, config: dict, dtype: torch.dtype):
        super().__init__(student, model, config, dtype)
        self.state = {name: value.detach().requires_grad_(True) for name, value in self.state.items()
                      if not name.startswith("blocks.")}
        self.block_grads: list[dict[str, torch.Tensor]] = [{} for _ in self.blocks]

    def run_blocks(self, x: torch.Tensor, mask: torch.Tensor | None,
                   bias: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        for own_block, grads in zip(self.blocks, self.block_grads, strict=True):
            x = through(own_block, x, grads, mask=mask, bias=bias, return_weights=True)
        return x, []

    def grads(self) -> dict[str, torch.Tensor | None]:
        own = {name: value.grad for name, value in self.state.items()}
        return own | {f"blocks.{layer}.{name}": g for layer, grads in enumerate(self.block_grads)
                      for name, g in grads.items()}


def blocks_probe(student: Student, config: dict) -> Callable[[torch.dtype], tuple]:
    """What decides the dtype a model of this config is checked in (fallback.in_runnable_dtype): a block
    of the student's own TinyTransformerLM(**config), run on inputs of a dtype with the causal mask (and
    an ALiBi-like bias for alibi). The model it builds draws its own init: the check seeds the worker
    again before it builds its own."""
    d_model, n_heads = config["d_model"], config["n_heads"]

    def run(wanted: torch.dtype) -> tuple:
        block = student.call(LM, **config).attribute("blocks").method("__getitem__", 0)
        x, mask, bias = block_inputs({"d_model": d_model, "n_heads": n_heads, "B": 1, "T": 3}, 0, wanted,
                                     masked=True, biased=config["pos_encoding"] == "alibi")
        return block.to(wanted).eval()(x, mask=mask, bias=bias, return_weights=True)
    return run


def expect_m1(result: object, expected: tuple, config: dict, dtype: torch.dtype, mode: str = "eval",
              hint: str = M1_HINT, diagnoses: Callable[[], dict[str, tuple]] | None = None) -> None:
    """The student's forward(idx, return_weights=True) equals `expected` (logits, weights); diagnoses,
    if given, is a function returning {mistake: (logits, weights)}."""
    what = f"{describe(config)} in {mode} mode, {dtype},"
    expect(isinstance(result, tuple) and len(result) == 2,
           f"forward(idx, return_weights=True) should return (logits, weights), got {type(result).__name__}")
    (logits, weights), (expected_logits, expected_weights) = result, expected
    tol = tolerance(config, dtype)
    expect_close(logits, expected_logits, f"the logits of {what}", **tol, hint=hint,
                 diagnoses=diagnoses and (lambda: {k: v[0] for k, v in diagnoses().items()}))
    expect(isinstance(weights, (list, tuple)) and len(weights) == len(expected_weights),
           f"return_weights=True should give a list of n_layers={len(expected_weights)} weight tensors")
    for layer, (w, expected_w) in enumerate(zip(weights, expected_weights, strict=True)):
        def layer_diagnoses(layer: int = layer) -> dict[str, torch.Tensor]:
            return {k: v[1][layer] for k, v in diagnoses().items()}

        expect_close(w, expected_w, f"weights[{layer}] of {what}", **tol,
                     hint="return each block's attention weights, in order",
                     diagnoses=diagnoses and layer_diagnoses)


# ------------------------------------------------------------------ the contract
@suite.case(1, max_examples=4)
@given(draw=lm_configs(), seed=seeds)
def logits_shape(student, draw, seed):
    """forward(idx) returns float logits (B, T, vocab_size) for every pos_encoding and norm"""
    for pos_encoding in POS_ENCODINGS:
        for norm in NORMS:
            config = changed(draw["model"], pos_encoding=pos_encoding, norm=norm)
            model = build(student, config, seed)
            idx = tokens(seed, config["vocab_size"], draw["B"], draw["T"])
            logits = expect_tensor(model(idx), (draw["B"], draw["T"], config["vocab_size"]),
                                   f"{describe(config)}(idx of shape {tuple(idx.shape)})")
            expect(logits.dtype == torch.float32,
                   f"{describe(config)} returns {logits.dtype} logits, expected torch.float32 "
                   "(the parameters' dtype)")
            expect(bool(torch.isfinite(logits).all()), f"{describe(config)} returns NaN or inf logits")


@suite.case(1, max_examples=6)
@given(draw=lm_configs(), seed=seeds)
def attention_weights(student, draw, seed):
    """forward(idx, return_weights=True) returns the same logits and a list of n_layers (B, H, T, T) weights
    """
    config, B, T = draw["model"], draw["B"], draw["T"]
    model = build(student, config, seed)
    idx = tokens(seed, config["vocab_size"], B, T)
    result = model(idx, return_weights=True)
    expect(isinstance(result, tuple) and len(result) == 2,
           f"{describe(config)}(idx, return_weights=True) should return (logits, weights), got "
           f"{type(result).__name__}")
    logits, weights = result
    expect_tensor(logits, (B, T, config["vocab_size"]), "logits")
    # Not EXACT: a float32 path that also returns the weights may round differently.
    expect_close(logits, model(idx), "logits with return_weights=True", atol=1e-6, rtol=1e-5,
                 hint="return_weights must not change the logits")
    L, H = config["n_layers"], config["n_heads"]
    got = "" if not isinstance(weights, (list, tuple)) else f" of length {len(weights)}"
    expect(isinstance(weights, (list, tuple)) and len(weights) == L,
           f"weights should be a list of n_layers={L} tensors (one per block), "
           f"got {type(weights).__name__}{got}")
    for layer, w in enumerate(weights):
        expect_tensor(w, (B, H, T, T), f"weights[{layer}]")


@suite.case(1, timeout=20, max_examples=4, float64=True)
@given(draw=lm_configs(), seed=seeds, dtype=dtypes)
def logits_follow_m1(student, draw, seed, dtype):
    """logits and weights are (M1) of the model's own embeddings, blocks, norm_f and lm_head, for every
    pos_encoding, in eval mode and in train mode with dropout=1"""
    B, T = draw["B"], draw["T"]
    hint = f"{M1_HINT}, with your own causal_mask, sinusoidal_encoding, alibi_bias and TransformerBlock"
    for pos_encoding in POS_ENCODINGS:
        # dropout=1 changes nothing in eval mode and, in train mode, zeroes what each dropout gets
        config = changed(draw["model"], pos_encoding=pos_encoding, dropout=1.0)

        def check(in_dtype: torch.dtype, config: dict = config) -> None:
            model = perturb_own(build(student, config, seed).to(in_dtype), seed)
            idx = tokens(seed, config["vocab_size"], B, T)
            parts = OwnParts(student, model, config, in_dtype)
            for training, mode in ((False, "eval"), (True, "train")):
                model.train(training)  # the blocks OwnParts runs are the model's: in its mode
                expect_m1(model(idx, return_weights=True), parts(idx, training), config, in_dtype, mode,
                          hint=hint)
        in_runnable_dtype(check, blocks_probe(student, config), dtype)


_BLOCK_INPUT = (2, 6)  # B, T: a dropout of rate >= 0.3 on every block's sublayers always shows


@suite.case(1, timeout=20, max_examples=4, float64=True)
@given(draw=lm_configs(), seed=seeds, p=st.sampled_from([0.3, 0.5]), activation=st.sampled_from(ACTIVATIONS))
def blocks_built_with_arguments(student, draw, seed, p, activation):
    """each block behaves as TransformerBlock(d_model, n_heads, d_ff, dropout, norm, rope, activation) built
    with the model's arguments"""
    d_model = draw["model"]["d_model"]
    mask = causal(_BLOCK_INPUT[1])
    for pos_encoding in dict.fromkeys(("rope", draw["model"]["pos_encoding"])):
        config = changed(draw["model"], pos_encoding=pos_encoding, dropout=p, activation=activation)
        arguments = (f"TransformerBlock({d_model}, {config['n_heads']}, {config['d_ff']}, dropout={p}, "
                     f"norm={config['norm']!r}, rope={pos_encoding == 'rope'}, activation={activation!r})")

        def check(dtype: torch.dtype, config: dict = config, arguments: str = arguments,
                  rope: bool = pos_encoding == "rope") -> None:
            x = randn(seed, *_BLOCK_INPUT, d_model, dtype=dtype)
            blocks = build(student, config, seed).to(dtype).attribute("blocks")
            for layer in range(config["n_layers"]):
                block = blocks.method("__getitem__", layer)
                twin = student.call(BLOCK, d_model, config["n_heads"], config["d_ff"], dropout=p,
                                    norm=config["norm"], rope=rope, activation=activation)
                twin.to(dtype)
                twin.load_state_dict(block.state_dict())
                for training, mode in ((False, "eval"), (True, "train")):
                    outputs = []
                    for module in (block, twin):
                        student.manual_seed(seed)  # the same dropout masks for both
                        outputs.append(module.train(training)(x, mask=mask))
                    expect_close(*outputs, f"blocks[{layer}]'s output in {mode} mode (same seed) of "
                                           f"{describe(config)}, against your {arguments} with its weights",
                                 **EXACT._asdict(),
                                 hint="build every block with the model's arguments: the same dropout, norm "
                                      'and activation, rope=(pos_encoding == "rope")')
        in_runnable_dtype(check, blocks_probe(student, config), torch.float64)


@suite.case(1, max_examples=3)
@given(draw=lm_configs(), seed=seeds)
def state_dict_keys(student, draw, seed):
    """state_dict() holds exactly docs/spec.md's keys for every pos_encoding and norm (no persistent
    buffers)"""
    for pos_encoding in POS_ENCODINGS:
        for norm in NORMS:
            config = changed(draw["model"], pos_encoding=pos_encoding, norm=norm)
            expect_spec_keys(build(student, config, seed).state_dict(), config)


@suite.case(1, max_examples=4)
@given(draw=lm_configs(), extra=st.integers(1, 4), seed=seeds)
def value_errors(student, draw, extra, seed):
    """unknown pos_encoding/norm, and T > max_len with learned positions, raise ValueError; other encodings
    take any T"""
    config = draw["model"]
    for bad in ("absolute", "Sinusoidal", "rotary"):
        expect_value_error(lambda bad=bad: student.call(LM, **changed(config, pos_encoding=bad)),
                           f"TinyTransformerLM(pos_encoding={bad!r})", ("pos_encoding",))
    for bad in ("sandwich", "Pre", "none"):
        expect_value_error(lambda bad=bad: student.call(LM, **changed(config, norm=bad)),
                           f"TinyTransformerLM(norm={bad!r})", ("norm",))
    max_len, V = config["max_len"], config["vocab_size"]
    learned = changed(config, pos_encoding="learned")
    model = build(student, learned, seed)
    expect_tensor(model(tokens(seed, V, 1, max_len)), (1, max_len, V),
                  f"with learned positions, T = max_len = {max_len} is allowed: logits")
    long = tokens(seed, V, 1, max_len + extra)
    expect_value_error(lambda: model(long), f"{describe(learned)} on T={max_len + extra} > max_len",
                       ("max_len", "T", "length"))
    for pos_encoding in ("sinusoidal", "rope", "alibi", "none"):
        other = changed(config, pos_encoding=pos_encoding)
        expect_tensor(build(student, other, seed)(long), (1, max_len + extra, V),
                      f"{describe(other)} on T={max_len + extra} > max_len (only learned positions have a "
                      "maximum length): logits")


def _moved(before: torch.Tensor, after: torch.Tensor, t: int, dtype: torch.dtype) -> list[int]:
    """The positions before t whose logits differ (the same weights: only by rounding if not, in float64
    far below 1e-9)."""
    atol = 1e-9 if dtype == torch.float64 else TOLERANCES[dtype].atol
    return [i for i in range(t) if not torch.allclose(before[:, i], after[:, i], atol=atol)]


@suite.case(1, max_examples=4, float64=True)
@given(draw=changed_token_configs(), seed=seeds)
def causality(student, draw, seed):
    """changing token t leaves the logits before t unchanged, for every pos_encoding (where your own parts do)
    """
    config, B, T, t = draw["model"], draw["B"], draw["T"], draw["t"]
    idx = tokens(seed, config["vocab_size"], B, T)
    changed_idx = idx.clone()
    changed_idx[:, t] = (changed_idx[:, t] + 1) % config["vocab_size"]
    for pos_encoding in POS_ENCODINGS:
        other = changed(config, pos_encoding=pos_encoding)

        def check(dtype: torch.dtype, other: dict = other) -> None:
            model = build(student, other, seed).to(dtype).eval()
            logits = expect_tensor(model(idx), (B, T, config["vocab_size"]), "logits")
            moved = _moved(logits, model(changed_idx), t, dtype)
            if moved:  # (M1) composed from your own parts leaks too: a mask or block of yours sees the future
                parts = OwnParts(student, model, other, dtype)
                moved = sorted(set(moved) - set(_moved(parts(idx)[0], parts(changed_idx)[0], t, dtype)))
            expect(not moved, f"{describe(other)}: changing token {t} changed the logits at earlier "
                              f"positions {moved}: the future leaks (is the causal mask passed to every "
                              "block?)")
        in_runnable_dtype(check, blocks_probe(student, other), torch.float64)


# ------------------------------------------------------------------ training to solve a task
@dataclass(frozen=True)
class Run:
    """One training run: an encoding and norm, trained by its recipe (grader.tasks.RECIPES), and the
    held-out accuracy required. The thresholds leave room for float noise and choices inside train()
    (fused AdamW, clipping by hand, ...) and, in the public run, for the student's initialisation."""

    pos_encoding: str
    norm: str
    threshold: float
    seed: int = 0

    @property
    def recipe(self) -> Recipe:
        return RECIPES[self.pos_encoding]

    @property
    def config(self) -> dict:
        return {"vocab_size": self.recipe.task.vocab_size, **MODEL_DEFAULTS, **self.recipe.model_kwargs,
                "norm": self.norm, "pos_encoding": self.pos_encoding}

    def describe(self) -> str:
        recipe = self.recipe
        return (f"{describe(self.config)} trained by train(steps={recipe.steps}, max_lr={recipe.max_lr}, "
                f"warmup_steps={recipe.warmup_steps}, weight_decay={recipe.weight_decay}) on batches of "
                f"{recipe.batch_size} sequences of the {recipe.task.name!r} task "
                f"({recipe.task.length} symbols)")


def train(student: Student, run: Run, init: dict | None = None) -> tuple[Remote, object]:
    """Build the student's model (seeded), load `init` if given, train it with the student's train()."""
    recipe = run.recipe
    model = build(student, run.config, run.seed)
    if init is not None:
        expect_spec_keys(model.state_dict(), run.config)
        model.load_state_dict(init)
    batches = list(itertools.islice(recipe.task.batches(recipe.batch_size, run.seed), recipe.steps))
    history = student.call("trainer.train", model, batches, steps=recipe.steps, max_lr=recipe.max_lr,
                           warmup_steps=recipe.warmup_steps, weight_decay=recipe.weight_decay)
    return model, history


def _accuracy(logits: object, y: torch.Tensor) -> float:
    expect(isinstance(logits, torch.Tensor) and logits.dim() == 3 and logits.shape[:2] == y.shape,
           f"logits of a {tuple(y.shape)} batch have shape {shape_of(logits)}, expected (B, T, vocab_size)")
    scored = y != IGNORE_INDEX
    return (logits.argmax(-1)[scored] == y[scored]).double().mean().item()


def own_accuracy(model: Remote, data: list) -> float:
    """Token accuracy of the student's own forward on `data` (computed here from its logits)."""
    model.eval()
    accuracies = [_accuracy(model(x), y) for x, y in data]
    return sum(accuracies) / len(accuracies)


def loss_curve(history: object, steps: int) -> str:
    """How the training loss in train()'s history moved, for messages."""
    try:
        losses = [float(v) for v in history["loss"]]
    except (TypeError, KeyError, IndexError, ValueError):
        return "train() did not return {\"loss\": [one float per step], ...}"
    if not losses:
        return "train() returned an empty loss history"
    first, last = losses[0], losses[-1]
    note = "" if len(losses) == steps else f" (it returned {len(losses)} losses for steps={steps})"
    trend = "" if last < first else ": it never went down (is the learning rate applied? zero_grad?)"
    return f"the training loss went from {first:.3g} to {last:.3g}{trend}{note}"


HELD_OUT_BATCHES = 2  # of 256 sequences, from a stream no training seed shares (Recipe.held_out)
# Measured with solutions/ over seeds 0-4 (init and batches), 2 x 256 held-out sequences: 1.00, also
# from a GPT-2-style N(0, 0.02), a Xavier, a Kaiming-normal (0.9995) or an N(0, 0.01) init of the
# student's own (grader.tasks.RECIPES). About 0.42 s of one CPU core.
PUBLIC_RUN = Run("learned", "pre", threshold=0.9)


@suite.case(1, timeout=60, integration=True)
def converges_public(student):
    """trained by your train(), your learned-position model learns a synthetic task (held-out accuracy)"""
    model, history = train(student, PUBLIC_RUN)
    accuracy = own_accuracy(model, PUBLIC_RUN.recipe.held_out(HELD_OUT_BATCHES))
    expect(accuracy >= PUBLIC_RUN.threshold,
           f"{PUBLIC_RUN.describe()} reaches {accuracy:.1%} token accuracy on held-out sequences (from your "
           f"model's logits), {PUBLIC_RUN.threshold:.0%} is required; "
           f"{loss_curve(history, PUBLIC_RUN.recipe.steps)}; check trainer.py ((T1) schedule, zero_grad, the "
           "loss on y != -100, clipping, AdamW groups (T2)) and model.py (M1)")
