"""trainer.py, hidden cases: lr_schedule (T1), param_groups (T2), train (T3) and evaluate against
the reference, with diagnoses from (T3) runs that each make one classic mistake."""
import torch
import torch.nn.functional as F
from hypothesis import Phase, example, given
from hypothesis import strategies as st
from torch import nn

from ...spec import IGNORE_INDEX, Visibility
from .. import Suite
from ..checks import Failed, expect, expect_close, telling
from ..public.trainer import (
    TYPICAL_SCHEDULE,
    check_groups,
    degenerate_schedule,
    describe,
    fixture_layers,
    fixture_model,
    float64_state,
    global_grad_norm,
    hit_some,
    make_batches,
    masked_cross_entropy,
    read_evaluation,
    read_history,
    schedule_variants,
    schedules,
    student_lr,
    twin_models,
)
from ..strategies import seeds
from .reference import ref

suite = Suite("trainer", Visibility.HIDDEN)
# Training runs cost a few ms each and their diagnoses a dozen more: find a failing example,
# report it, and skip hypothesis's shrinking (which would retrain the model dozens of times).
NO_SHRINK = (Phase.explicit, Phase.generate)


@suite.case(1)
@given(config=schedules(), extra=st.integers(0, 6))
@telling(degenerate_schedule, TYPICAL_SCHEDULE)
def lr_schedule_matches_reference(student, config, extra):
    """lr_schedule follows (T1) at every step, during warmup, decay and past total_steps"""
    steps = range(config["total_steps"] + 1 + extra)
    actual = torch.tensor([student_lr(student, s, config) for s in steps], dtype=torch.float64)
    expected = torch.tensor([ref.trainer.lr_schedule(s, **config) for s in steps], dtype=torch.float64)
    # plain float arithmetic: any correct formula agrees to rounding, relative to max_lr
    what = f"[lr_schedule(step, {describe(config)}) for step in range({len(steps)})]"
    expect_close(actual, expected, what, atol=1e-9 * config["max_lr"], rtol=1e-6,
                 diagnoses=lambda: schedule_variants(config, steps),
                 hint="the index is the step: warmup is max_lr * (step + 1) / warmup_steps, "
                      "then the cosine (T1)")


@suite.case(2)
@given(V=st.integers(2, 9), d=st.integers(2, 8), hidden=st.one_of(st.none(), st.integers(1, 7)),
       bias=st.booleans(), norm=st.booleans(), weight_decay=st.sampled_from([0.1, 0.01, 0.5]), seed=seeds)
def param_groups_matches_rule(student, V, d, hidden, bias, norm, weight_decay, seed):
    """param_groups splits every model's parameters by (T2): ndim >= 2 decayed, the rest not, each exactly
    once"""
    check_groups(student, fixture_layers(V, d, hidden, bias, norm), seed, weight_decay)


def _variant_train(model: nn.Module, batches: list, bug: str, *, steps: int, max_lr: float,
                   warmup_steps: int, min_lr: float, weight_decay: float, grad_clip: float | None,
                   betas: tuple[float, float]) -> tuple[dict, dict]:
    """(T3) with one classic mistake: the history and the final parameters it gives."""
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    others = [p for p in model.parameters() if p.ndim < 2]
    if bug == "decay_all":
        groups = [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    elif bug == "decay_non_bias":
        named = list(model.named_parameters())
        groups = [{"params": [p for n, p in named if not n.endswith("bias")], "weight_decay": weight_decay},
                  {"params": [p for n, p in named if n.endswith("bias")], "weight_decay": 0.0}]
    else:
        groups = [{"params": matrices, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
    optimizer_cls = torch.optim.Adam if bug == "adam" else torch.optim.AdamW
    optimizer = optimizer_cls(groups, lr=max_lr, betas=(0.9, 0.999) if bug == "betas" else betas)
    history = {"loss": [], "lr": [], "grad_norm": []}
    model.train()
    for step, (x, y) in zip(range(steps), batches, strict=False):
        lr = ref.trainer.lr_schedule(step, max_lr=max_lr, warmup_steps=warmup_steps,
                                     total_steps=steps, min_lr=min_lr)
        if bug != "lr_never_set":
            for group in optimizer.param_groups:
                group["lr"] = lr
        logits = model(x)
        if bug == "no_ignore":
            loss = F.cross_entropy(logits.flatten(0, -2), y.flatten().clamp(min=0))
        elif bug == "all_positions":
            loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=IGNORE_INDEX,
                                   reduction="sum") / y.numel()
        else:
            loss = masked_cross_entropy(logits, y)
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        loss.backward()
        norm = global_grad_norm(model)
        if grad_clip is not None and bug == "clip_each":
            for p in model.parameters():
                torch.nn.utils.clip_grad_norm_([p], grad_clip)
        elif grad_clip is not None and bug != "no_clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        history["loss"].append(loss.item())
        history["lr"].append(lr)
        history["grad_norm"].append(norm)
    return ({k: torch.tensor(v, dtype=torch.float64) for k, v in history.items()},
            {k: v.detach().clone() for k, v in model.state_dict().items()})


_TRAIN_BUGS = {
    "no_ignore": "positions with y == -100 are not ignored in the loss "
                 "(use ignore_index=-100, or mask them out)",
    "all_positions": "the loss is divided by every position, -100 ones included, "
                     "instead of by the scored ones",
    "no_zero_grad": "the gradients are never zeroed "
                    "(optimizer.zero_grad() missing: they accumulate across steps)",
    "lr_never_set": "the scheduled lr is computed but never written into optimizer.param_groups "
                    "(so the optimizer keeps its initial lr)",
    "no_clip": "the gradients are not clipped (clip the global norm at grad_clip before optimizer.step())",
    "clip_each": "each parameter's gradient is clipped on its own instead of the global norm of all of them",
    "decay_non_bias": "every parameter but the biases gets weight decay, LayerNorm weights included "
                      "(decay only ndim >= 2: use param_groups)",
    "decay_all": "every parameter gets weight decay, biases and LayerNorm weights included "
                 "(decay only ndim >= 2: use param_groups)",
    "adam": "torch.optim.Adam is used instead of AdamW (weight decay must be decoupled)",
    "betas": "betas is not passed to AdamW (its default (0.9, 0.999) is used)",
}


class _Variants:
    """The classic mistakes' histories and parameters, computed once and only when needed."""

    def __init__(self, layers: list, seed: int, batches: list, kwargs: dict):
        self.layers, self.seed, self.batches, self.kwargs = layers, seed, batches, kwargs
        self._runs: dict | None = None

    def runs(self) -> dict:
        if self._runs is None:
            self._runs = {}
            for bug, sentence in _TRAIN_BUGS.items():
                model = fixture_model(self.layers, self.seed)
                self._runs[sentence] = _variant_train(model, self.batches, bug, **self.kwargs)
        return self._runs

    def history(self, key: str) -> dict[str, torch.Tensor]:
        return {sentence: history[key] for sentence, (history, _) in self.runs().items()}

    def parameter(self, key: str) -> dict[str, torch.Tensor]:
        return {sentence: state[key] for sentence, (_, state) in self.runs().items()}


@st.composite
def train_configs(draw: st.DrawFn) -> dict:
    steps = draw(st.integers(3, 7))
    return {"steps": steps, "max_lr": draw(st.sampled_from([0.01, 0.03, 0.003])),
            "warmup_steps": draw(st.integers(0, steps - 1)),
            "min_lr": draw(st.sampled_from([0.0, 0.001])),
            "weight_decay": draw(st.sampled_from([0.1, 0.5, 0.0])),
            "grad_clip": draw(st.sampled_from([0.05, None, 1.0, 0.3])),
            "betas": draw(st.sampled_from([(0.9, 0.95), (0.8, 0.99)]))}


@suite.case(1, timeout=30, max_examples=6, phases=NO_SHRINK)
@example(config={"steps": 6, "max_lr": 0.03, "warmup_steps": 2, "min_lr": 0.001, "weight_decay": 0.1,
                 "grad_clip": 0.05, "betas": (0.8, 0.99)}, V=7, d=6, seed=11)
@given(config=train_configs(), V=st.integers(3, 9), d=st.integers(2, 8), seed=seeds)
def train_matches_reference(student, config, V, d, seed):
    """train's history (loss, lr, grad_norm) and final parameters equal (T3)'s, with -100 targets and clipping
    """
    layers = fixture_layers(V, d, hidden=d + 1)
    steps = config["steps"]
    remote, local = twin_models(student, layers, seed)
    batches = make_batches(seed, steps, V, [(1 + (seed + b) % 3, 3 + (seed + b) % 4) for b in range(steps)])
    history = read_history(student.call("trainer.train", remote, batches, **config), steps)
    expected = ref.trainer.train(local, batches, **config)
    try:
        _compare_training(history, expected, float64_state(remote), local.state_dict(),
                          _Variants(layers, seed, batches, config), config)
    except Failed as error:  # name the setting: it decides which mistakes can show
        setting = ", ".join(f"{k}={v}" for k, v in config.items())
        raise Failed(f"{error} [train(model, batches, {setting}), "
                     f"{len(batches)} batches with some y == -100]") from None


def _compare_training(history: dict, expected: dict, trained: dict, expected_state: dict,
                      variants: _Variants, config: dict) -> None:
    """The student's run against the reference's; the variants are trained only on a mismatch.

    The history is compared tightly (float64, the same operations); the parameters more loosely:
    AdamW's m / sqrt(v) turns rounding in near-zero gradients into lr-sized steps."""
    steps = config["steps"]
    schedule = {k: config[k] for k in ("max_lr", "warmup_steps", "min_lr")} | {"total_steps": steps}
    expect_close(history["lr"], torch.tensor(expected["lr"], dtype=torch.float64), "history['lr']",
                 atol=1e-9 * config["max_lr"], rtol=1e-6,
                 diagnoses=lambda: schedule_variants(schedule, range(steps)),
                 hint="step t trains with lr_schedule(t, ..., total_steps=steps) (T1)")
    expect_close(history["loss"], torch.tensor(expected["loss"], dtype=torch.float64), "history['loss']",
                 atol=1e-9, rtol=1e-6, diagnoses=lambda: variants.history("loss"),
                 hint="the index is the step: loss = mean cross-entropy over y != -100, then backward, clip, "
                      "AdamW step over param_groups")
    expected_norm = torch.tensor(expected["grad_norm"], dtype=torch.float64)
    after_clipping = {}
    if config["grad_clip"] is not None:
        sentence = "the norm is recorded after clipping (record it before: clip_grad_norm_ returns it)"
        after_clipping[sentence] = expected_norm.clamp(max=config["grad_clip"])
    expect_close(history["grad_norm"], expected_norm, "history['grad_norm']", atol=1e-9, rtol=1e-6,
                 diagnoses=lambda: after_clipping | variants.history("grad_norm"),
                 hint="the global L2 norm of every parameter's gradient, measured before clipping")
    for key, value in expected_state.items():
        expect(key in trained, f"the model lost its parameter {key!r} during train")
        expect_close(trained[key], value, f"parameter {key!r} after train", atol=1e-7, rtol=1e-5,
                     diagnoses=lambda key=key: variants.parameter(key),
                     hint="every step: set the lr on every group, zero_grad, backward, clip, step")


def _evaluate_variants(local: nn.Module, batches: list) -> dict[str, tuple[float, float]]:
    with torch.no_grad():
        per_batch, nll, hits, count, all_nll, all_hits, all_count = [], 0.0, 0, 0, 0.0, 0, 0
        for x, y in batches:
            logits, scored = local(x), y != IGNORE_INDEX
            ce = F.cross_entropy(logits[scored], y[scored], reduction="sum").item()
            hit = (logits.argmax(-1) == y)[scored].sum().item()
            per_batch.append((ce / scored.sum().item(), hit / scored.sum().item()))
            nll, hits, count = nll + ce, hits + hit, count + scored.sum().item()
            all_nll += F.cross_entropy(logits.flatten(0, -2), y.flatten().clamp(min=0),
                                       reduction="sum").item()
            all_hits += (logits.argmax(-1) == y).sum().item()
            all_count += y.numel()
    mean = [sum(p[i] for p in per_batch) / len(per_batch) for i in range(2)]
    return {
        "the per-batch means are averaged (a batch with fewer scored positions weighs as much as a full one: "
        "sum over every position, divide once)": tuple(mean),
        "positions with y == -100 are counted": (all_nll / all_count, all_hits / all_count),
        "the -100 positions are left out of the sum but counted in the denominator":
            (nll / all_count, hits / all_count),
    }


@suite.case(2, timeout=20)
@given(V=st.integers(3, 9), d=st.integers(2, 8),
       sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(2, 6)), min_size=2, max_size=4), seed=seeds)
def evaluate_matches_reference(student, V, d, sizes, seed):
    """evaluate over batches of unequal sizes with -100 targets gives the loss and accuracy over all scored
    positions"""
    remote, local = twin_models(student, fixture_layers(V, d), seed)
    batches = hit_some(local, make_batches(seed, len(sizes), V, sizes, ignore=0.4), seed)
    loss, accuracy = read_evaluation(student.call("trainer.evaluate", remote, batches))
    expected = ref.trainer.evaluate(local, batches)
    variants = _evaluate_variants(local, batches)
    for i, (name, value) in enumerate((("loss", loss), ("accuracy", accuracy))):
        expect_close(torch.tensor(value, dtype=torch.float64),
                     torch.tensor(expected[name], dtype=torch.float64),
                     f"evaluate(...)[{name!r}]", atol=1e-9, rtol=1e-6, float64=True,  # float64 sums
                     diagnoses={s: torch.tensor(v[i], dtype=torch.float64) for s, v in variants.items()},
                     hint="mean over every position with y != -100 across all batches, "
                          "in eval mode without gradients")
