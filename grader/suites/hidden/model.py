"""model.py, hidden: (M1) composed from the model's own parts with the classic mistakes named,
dropout, gradients against the model's own forward, and training scored in the reference model.
Only the training runs use the reference (and the student's whole stack)."""
import functools
import math

import torch
import torch.nn.functional as F
from hypothesis import example, given

from ...sandbox.worker import eager
from ...spec import NORMS, Visibility
from ...student import Remote, Student
from .. import Suite
from ..checks import Failed, expect
from ..fallback import checked_in, in_runnable_dtype
from ..public.block import perturb_own
from ..public.model import (
    HELD_OUT_BATCHES,
    DifferentiableParts,
    OwnParts,
    Run,
    blocks_probe,
    build,
    changed,
    describe,
    expect_m1,
    expect_spec_keys,
    lm_configs,
    loss_curve,
    own_accuracy,
    tokens,
    tolerance,
    train,
)
from ..strategies import dtypes, randn, seeds
from .block import expect_gradients_follow_forward, expect_gradients_match
from .reference import ref

suite = Suite("model", Visibility.HIDDEN)
# A config where every mistake _mistakes() knows shows clearly (two heads with distinct ALiBi slopes,
# two layers, T = max_len); each comparison runs it first, whatever hypothesis draws next.
EXPLICIT = {"model": {"vocab_size": 5, "d_model": 8, "n_heads": 2, "n_layers": 2, "d_ff": 8, "max_len": 6,
                      "norm": "pre", "pos_encoding": "sinusoidal"}, "B": 2, "T": 6}


def _own_model(student: Student, config: dict, seed: int, dtype: torch.dtype) -> Remote:
    """The student's model in `dtype`, its own parameters perturbed, in eval mode."""
    return perturb_own(build(student, config, seed).to(dtype), seed).eval()


# ------------------------------------------------------------------ classic mistakes
def _layouts(table: torch.Tensor) -> dict[str, torch.Tensor]:
    """A (P1) table and two classic misreadings of it."""
    sin, cos = table[:, 0::2], table[:, 1::2]
    return {"spec": table, "concatenated": torch.cat([sin, cos], dim=-1),
            "swapped": torch.stack([cos, sin], dim=-1).flatten(-2)}


def _variant(parts: OwnParts, idx: torch.Tensor, training: bool, *, scale: float = 1.0,
             positions: str = "spec", after_dropout: bool = False, causal_mask: bool = True,
             alibi: bool = True, final_norm: str = "spec") -> tuple:
    """(logits, weights) of (M1) composed from the model's own parts, with one step changed as a student
    might: scale (token embeddings times it), positions ("spec", "none", "concatenated", "swapped",
    "tokens": pos_emb looked up by token id), after_dropout (positions added after drop), causal_mask,
    alibi, final_norm ("spec", "none", "extra": an affine-free LayerNorm after the blocks)."""
    T, pos_encoding = idx.size(1), parts.config["pos_encoding"]
    x = F.embedding(idx, parts.state["tok_emb.weight"]) * scale
    pos = None
    if pos_encoding == "sinusoidal" and positions in ("spec", "concatenated", "swapped"):
        pos = _layouts(parts.positions(T))[positions]
    elif pos_encoding == "learned" and positions in ("spec", "tokens"):
        pos = parts.state["pos_emb.weight"][idx if positions == "tokens" else torch.arange(T)]
    if pos is not None and not after_dropout:
        x = x + pos
    x = parts.drop(x, training)
    if pos is not None and after_dropout:
        x = x + pos
    x, weights = parts.run_blocks(x, parts.mask(T) if causal_mask else None, parts.bias(T) if alibi else None)
    if final_norm == "none":
        return F.linear(x, parts.state["lm_head.weight"]), weights
    return parts.head(F.layer_norm(x, x.shape[-1:]) if final_norm == "extra" else x), weights


def _mistakes(parts: OwnParts, idx: torch.Tensor, training: bool) -> dict[str, tuple]:
    """What classic mistakes of (M1) return, as (logits, weights)."""
    config = parts.config
    pos = config["pos_encoding"]
    changes: dict[str, dict] = {}
    if config["norm"] == "pre":
        changes["the pre-norm model skips its final norm_f before lm_head"] = {"final_norm": "none"}
    else:
        changes["the post-norm model applies a final LayerNorm before lm_head (post-norm has none: each "
                "block already ends in norm2)"] = {"final_norm": "extra"}
    if pos in ("sinusoidal", "learned"):
        changes[f"the {pos} positions are not added to the token embeddings"] = {"positions": "none"}
    if pos == "sinusoidal":
        changes["the sinusoidal table is laid out [sin | cos] in two halves instead of interleaved "
                "(P1: sin in even columns 2j, cos in odd columns 2j+1)"] = {"positions": "concatenated"}
        changes["the sinusoidal table has sin and cos swapped (P1: sin in even columns, cos in odd)"] = \
            {"positions": "swapped"}
    if pos == "learned" and config["vocab_size"] <= config["max_len"]:
        changes["pos_emb is looked up with the token ids instead of the positions arange(T)"] = \
            {"positions": "tokens"}
    if pos == "alibi":
        changes["the ALiBi bias alibi_bias(n_heads, T) is not passed to the blocks"] = {"alibi": False}
    changes["the token embeddings are multiplied by sqrt(d_model) ((M1) adds them unscaled)"] = \
        {"scale": math.sqrt(config["d_model"])}
    changes["the blocks get no causal mask (every token sees the future)"] = {"causal_mask": False}
    changes["the positions are added after the embedding dropout instead of before it ((M1): x = "
            "drop(tok_emb(idx) + pos))"] = {"after_dropout": True}
    return {sentence: _variant(parts, idx, training, **change) for sentence, change in changes.items()}


def _expect_own_m1(student: Student, model: Remote, config: dict, idx: torch.Tensor, dtype: torch.dtype,
                   training: bool = False) -> None:
    """The student's (logits, weights) for idx are (M1) of its own parts, else name the mistake."""
    parts = OwnParts(student, model.train(training), config, dtype)
    expected = parts(idx, training)
    tol = tolerance(config, dtype)

    @functools.cache
    def mistakes() -> dict[str, tuple]:
        # only the mistakes that change the logits well beyond the tolerance (in eval mode, or without
        # positions, adding them after the dropout changes nothing): a name is never a guess
        return {sentence: variant for sentence, variant in _mistakes(parts, idx, training).items()
                if not torch.allclose(variant[0], expected[0], atol=100 * tol["atol"],
                                      rtol=100 * tol["rtol"])}

    expect_m1(model(idx, return_weights=True), expected, config, dtype, "train" if training else "eval",
              diagnoses=mistakes)


# ------------------------------------------------------------------ (M1) with every encoding and norm
def _expect_matches(student: Student, draw: dict, pos_encodings: tuple[str, ...], seed: int,
                    dtype: torch.dtype) -> None:
    """Each of pos_encodings, in the norm drawn (like the sizes); the explicit example, where every mistake
    shows, in both norms."""
    B, T = draw["B"], draw["T"]
    for norm in NORMS if draw == EXPLICIT else (draw["model"]["norm"],):
        for pos_encoding in pos_encodings:
            config = changed(draw["model"], pos_encoding=pos_encoding, norm=norm)
            idx = tokens(seed, config["vocab_size"], B, T)

            def check(in_dtype: torch.dtype, config: dict = config, idx: torch.Tensor = idx) -> None:
                _expect_own_m1(student, _own_model(student, config, seed, in_dtype), config, idx, in_dtype)
            in_runnable_dtype(check, blocks_probe(student, config), dtype)


@suite.case(1, timeout=20, max_examples=4, float64=True)
@example(draw=EXPLICIT, seed=1, dtype=torch.float64)
@given(draw=lm_configs(), seed=seeds, dtype=dtypes)
def m1_absolute_positions(student, draw, seed, dtype):
    """sinusoidal, learned and no positions: logits and weights are (M1) of the model's own parts; mistakes
    named"""
    _expect_matches(student, draw, ("sinusoidal", "learned", "none"), seed, dtype)


@suite.case(1, timeout=20, max_examples=4, float64=True)
@example(draw=EXPLICIT, seed=1, dtype=torch.float64)
@given(draw=lm_configs(), seed=seeds, dtype=dtypes)
def m1_relative_positions(student, draw, seed, dtype):
    """rope and alibi: logits and weights are (M1) of the model's own parts; mistakes named"""
    _expect_matches(student, draw, ("rope", "alibi"), seed, dtype)


@suite.case(1, timeout=20, max_examples=4, float64=True)
@example(draw=EXPLICIT, seed=1)
@given(draw=lm_configs(), seed=seeds)
def dropout(student, draw, seed):
    """dropout=1.0: no effect in eval mode; in train mode it zeroes drop(tok_emb + positions) and every block
    dropout"""
    config, B, T = draw["model"], draw["B"], draw["T"]
    idx = tokens(seed, config["vocab_size"], B, T)
    # the explicit example in both encodings that add positions (where adding them after the dropout
    # shows), each generated one in the encoding it drew, like its sizes
    encodings = ("sinusoidal", "learned") if draw == EXPLICIT else (config["pos_encoding"],)
    for pos_encoding in encodings:
        other = changed(config, pos_encoding=pos_encoding, dropout=1.0)

        def check(dtype: torch.dtype, other: dict = other) -> None:
            model = _own_model(student, other, seed, dtype)
            for training in (False, True):
                _expect_own_m1(student, model, other, idx, dtype, training)
        in_runnable_dtype(check, blocks_probe(student, other), torch.float64)


@suite.case(1, max_examples=6, float64=True)
@example(draw=EXPLICIT, seed=1)
@given(draw=lm_configs(), seed=seeds)
def gradients(student, draw, seed):
    """the gradients of the logits w.r.t. every parameter follow the model's own forward (float64; float32
    through your own blocks' backward where they cannot run in float64)"""
    config, B, T = draw["model"], draw["B"], draw["T"]

    def check(dtype: torch.dtype) -> None:
        model = _own_model(student, config, seed, dtype)
        idx = tokens(seed, config["vocab_size"], B, T)
        grad_out = randn(seed + 1, B, T, config["vocab_size"], dtype=dtype)
        hint = ("part of the forward is cut from the graph (.detach(), .data, torch.no_grad(), a tensor "
                "rebuilt from numbers)")
        if dtype == torch.float64:
            expect_gradients_follow_forward(model, [idx], {}, grad_out, seed, describe(config), hint)
            return
        # your blocks cannot run in float64: (M1) backpropagated through your own blocks
        parts = DifferentiableParts(student, model, config, dtype)
        parts(idx)[0].backward(grad_out)
        expect_gradients_match(model, [idx], {}, grad_out, None, parts.grads(),
                               describe(config) + checked_in(dtype, torch.float64, "TransformerBlock"), hint)
    in_runnable_dtype(check, blocks_probe(student, config), torch.float64)


# ------------------------------------------------------------------ training, scored in the reference
def _expect_converges(student: Student, run: Run) -> None:
    """Train the student's model with the student's train(), from the reference's seeded init
    (initialisation is not part of the contract), then evaluate the trained state dict in the reference."""
    config, steps = run.config, run.recipe.steps
    eager.manual_seed(run.seed)
    init = ref.model.TinyTransformerLM(**config).state_dict()
    model, history = train(student, run, init)
    state = model.state_dict()
    expect_spec_keys(state, config)
    reference = ref.model.TinyTransformerLM(**config)
    try:
        reference.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as error:
        raise Failed(f"the trained state dict does not fit the reference model: {str(error)[:300]}") from None
    expect(all(bool(torch.isfinite(v).all()) for v in state.values()),
           f"after training, {run.describe()} has NaN or inf weights; {loss_curve(history, steps)}")
    data = run.recipe.held_out(HELD_OUT_BATCHES)
    accuracy = ref.trainer.evaluate(reference, data)["accuracy"]
    if accuracy >= run.threshold:
        return
    own = own_accuracy(model, data)
    where = ("your model scores about the same with its own forward, so training itself falls short: if the "
             "other model tests pass, look at trainer.py: (T1) schedule, zero_grad, the loss on y != -100, "
             "clipping, AdamW groups (T2)"
             if abs(own - accuracy) < 0.05 else
             f"your own forward scores {own:.1%} on the same data: it computes something other than (M1) "
             "(see the other model tests)")
    raise Failed(f"{run.describe()} reaches {accuracy:.1%} token accuracy on held-out sequences "
                 f"(evaluated by the reference model holding your trained weights), {run.threshold:.0%} is "
                 f"required; {loss_curve(history, steps)}; {where}")


# Measured with solutions/ and examples/submissions/correct over seeds 0-4 (init and batches) and both
# norms, 2 x 256 held-out sequences: at least 0.9968 and 0.9944 (sinusoidal, rope), in about 0.48 s and
# 0.16 s of one CPU core (grader.tasks.RECIPES).
SINUSOIDAL_PRE = Run("sinusoidal", "pre", threshold=0.95)
ROPE_POST = Run("rope", "post", threshold=0.95)


@suite.case(2, timeout=60, integration=True)
def converges_sinusoidal_pre(student):
    """trained by your train(), a sinusoidal pre-norm model learns a synthetic task (scored in the reference
    model)"""
    _expect_converges(student, SINUSOIDAL_PRE)


@suite.case(1, timeout=60, integration=True)
def converges_rope_post(student):
    """trained by your train(), a rope post-norm model learns a synthetic task (scored in the reference model)
    """
    _expect_converges(student, ROPE_POST)
