"""trainer.py, public cases: the contracts of lr_schedule (T1), param_groups (T2), train (T3) and
evaluate, without the reference; train's steps are replayed here, AdamW written out.

Every model here is built from torch's own layers (the worker's fixtures), never from the
student's other files, so this component is graded on its own. The judge builds a twin of each
fixture model and loads the same parameters into both; float64 throughout.
"""
import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st
from torch import nn

from ...sandbox.worker import eager
from ...spec import IGNORE_INDEX, TOLERANCES, Visibility
from ...student import Remote, Student
from .. import Suite
from ..checks import Failed, expect, expect_close, expect_number, telling
from ..twins import load_twin, perturb

suite = Suite("trainer", Visibility.PUBLIC)
HISTORY_KEYS = ("loss", "lr", "grad_norm")


# ---------------------------------------------------------------------------- fixtures
def fixture_layers(V: int, d: int, hidden: int | None = None, bias: bool = True,
            norm: bool = True) -> list[tuple[str, tuple, dict]]:
    """Embedding(V, d) [LayerNorm(d)] [Linear(d, hidden)] Linear(., V): a tiny next-token model."""
    layers = [("Embedding", (V, d), {})]
    if norm:
        layers.append(("LayerNorm", (d,), {}))
    width = d
    if hidden is not None:
        layers.append(("Linear", (d, hidden), {"bias": bias}))
        width = hidden
    layers.append(("Linear", (width, V), {"bias": bias}))
    return layers


def fixture_model(layers: list[tuple[str, tuple, dict]], seed: int) -> nn.Module:
    """The judge's fixture model, float64, every parameter perturbed (so no two are equal and
    LayerNorm gains and biases are not 1 and 0)."""
    eager.manual_seed(seed)
    model = nn.Sequential(*(getattr(nn, name)(*args, **kwargs) for name, args, kwargs in layers))
    return perturb(model.double(), seed)


def twin_models(student: Student, layers: list[tuple[str, tuple, dict]],
                seed: int) -> tuple[Remote, nn.Module]:
    """The fixture model in the worker (a Remote) and its twin here, float64, same parameters."""
    local = fixture_model(layers, seed)
    modules = [student.call(f"torch.nn.{name}", *args, **kwargs) for name, args, kwargs in layers]
    return load_twin(student.call("torch.nn.Sequential", *modules), local), local


def make_batches(seed: int, n: int, V: int, shapes: list[tuple[int, int]] | None = None,
             ignore: float = 0.3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n batches of (x, y) int64 (B, T); about `ignore` of the targets are -100, never all of a batch."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(n):
        B, T = shapes[b] if shapes else (2, 4)
        x = torch.randint(V, (B, T), generator=g)
        y = torch.randint(V, (B, T), generator=g)
        drop = torch.rand(B, T, generator=g) < ignore
        drop.view(-1)[torch.randint(B * T, (1,), generator=g)] = False  # keep one scored position
        out.append((x, y.masked_fill(drop, IGNORE_INDEX)))
    return out


def _floats(values: object, n: int, what: str) -> torch.Tensor:
    expect(isinstance(values, (list, tuple)),
           f"{what} should be a list of floats, got {type(values).__name__}")
    expect(len(values) == n, f"{what} has {len(values)} entries, expected {n} (one per step)")
    return torch.tensor([expect_number(v, f"{what}[{i}]") for i, v in enumerate(values)], dtype=torch.float64)


def read_history(result: object, steps: int) -> dict[str, torch.Tensor]:
    """train's returned history as float64 tensors, one value per step, or a Failed saying what is off."""
    expect(isinstance(result, dict), f"train should return a dict, got {type(result).__name__}")
    missing = [k for k in HISTORY_KEYS if k not in result]
    expect(not missing, f"train's history has no {missing}: it must hold 'loss', 'lr' and 'grad_norm'")
    return {k: _floats(result[k], steps, f"history[{k!r}]") for k in HISTORY_KEYS}


def float64_state(remote: Remote) -> dict[str, torch.Tensor]:
    """The worker model's state dict, here, in float64."""
    return {k: v.to(torch.float64) for k, v in remote.state_dict().items()}


# ---------------------------------------------------------------------------- lr_schedule (T1)
@st.composite
def schedules(draw: st.DrawFn) -> dict:
    """max_lr, warmup_steps, total_steps (at most warmup_steps too, where T1's max(1, ...) matters) and
    min_lr <= max_lr."""
    max_lr = draw(st.sampled_from([1.0, 3e-4, 0.1, 6e-4, 2.5]))
    warmup = draw(st.integers(0, 6))
    total = max(0, warmup + draw(st.integers(-3, 14)))
    min_lr = max_lr * draw(st.sampled_from([0.0, 0.1, 0.5]))
    return {"max_lr": max_lr, "warmup_steps": warmup, "total_steps": total, "min_lr": min_lr}


def student_lr(student: Student, step: int, config: dict) -> float:
    """The student's lr_schedule(step, **config), checked to be a number."""
    value = student.call("trainer.lr_schedule", step, **config)
    return expect_number(value, f"lr_schedule({step}, ...)")


def describe(config: dict) -> str:
    """'max_lr=1, warmup_steps=2, ...' for messages."""
    return ", ".join(f"{k}={v:g}" for k, v in config.items())


def schedule_at(config: dict, step: int, *, shift: int = 1, late: bool = False, clamp: bool = True,
                cut: bool = False, start: int | None = None, span: int | None = None,
                shape: str = "cosine") -> float:
    """(T1) at `step`, written out here; each keyword makes one classic mistake: shift=0 (warmup
    max_lr * step / warmup_steps), late (max_lr * (step + 1) / (warmup_steps + 1)), clamp=False, cut
    (the cosine falls to 0 and is cut off at min_lr), start and span (where the progress counts from,
    and over how many steps), shape (how the rate falls with the progress)."""
    max_lr, warmup, total, min_lr = (config[k] for k in ("max_lr", "warmup_steps", "total_steps", "min_lr"))
    if step < warmup:
        return max_lr * (step + shift) / (warmup + late)
    p = (step - (warmup if start is None else start)) / (span or max(1, total - warmup))
    if clamp:
        p = min(max(p, 0.0), 1.0)
    coeff = {"cosine": 0.5 * (1 + math.cos(math.pi * p)), "linear": 1 - p,
             "quarter": math.cos(0.5 * math.pi * p)}[shape]
    if cut:
        return max(min_lr, coeff * max_lr)
    return min_lr + coeff * (max_lr - min_lr)


def schedule_variants(config: dict, steps: range) -> dict[str, torch.Tensor]:
    """What classic mistakes in (T1) return at these steps (computed here, for the diagnoses)."""
    total, warmup = config["total_steps"], config["warmup_steps"]

    def at(changed: dict | None = None, **kw: object) -> torch.Tensor:
        return torch.tensor([schedule_at({**config, **(changed or {})}, s, **kw) for s in steps],
                            dtype=torch.float64)

    return {
        "the warmup is off by one (max_lr * step / warmup_steps: step 0 gets 0 and the peak comes one step "
        "late)": at(shift=0),
        "the warmup reaches its peak one step late (max_lr * (step + 1) / (warmup_steps + 1))": at(late=True),
        "the cosine progress is not clamped (past total_steps the rate rises again)": at(clamp=False),
        "the cosine decays to 0 instead of to min_lr": at({"min_lr": 0.0}),
        "the cosine falls from max_lr to 0 and is cut off at min_lr, instead of falling to min_lr":
            at(cut=True),
        "the cosine progress is counted from step 0 instead of from warmup_steps":
            at(start=0, span=max(1, total)),
        "the cosine progress is divided by total_steps instead of total_steps - warmup_steps":
            at(span=max(1, total)),
        "the cosine progress starts one step early (step - warmup_steps + 1)": at(start=warmup - 1),
        "the rate decays linearly after the warmup instead of along the cosine "
        "min_lr + (max_lr - min_lr) (1 + cos(pi p)) / 2": at(shape="linear"),
        "the rate follows a quarter cosine cos(pi p / 2) instead of (1 + cos(pi p)) / 2": at(shape="quarter"),
    }


def degenerate_schedule(config: dict, **_: object) -> bool:
    """A schedule where warmup and decay mistakes look alike or divide by zero."""
    return config["total_steps"] <= config["warmup_steps"] + 1 or config["warmup_steps"] <= 1


TYPICAL_SCHEDULE = {"config": {"max_lr": 1.0, "warmup_steps": 4, "total_steps": 20, "min_lr": 0.1},
                    "extra": 2}
"""A long warmup and decay to a min_lr above 0, two steps past its end: where each schedule mistake shows."""


SHORT_SCHEDULES = [{"max_lr": 1.0, "warmup_steps": 3, "total_steps": 3, "min_lr": 0.1},
                   {"max_lr": 0.1, "warmup_steps": 4, "total_steps": 2, "min_lr": 0.0},
                   {"max_lr": 2.5, "warmup_steps": 0, "total_steps": 0, "min_lr": 0.5}]
"""total_steps <= warmup_steps: T1's max(1, total_steps - warmup_steps) keeps p defined, and p = 1 (min_lr)
from the step after the warmup on."""


@suite.case(2)
@example(config=SHORT_SCHEDULES[0])
@example(config=SHORT_SCHEDULES[1])
@example(config=SHORT_SCHEDULES[2])
@given(config=schedules())
@telling(degenerate_schedule, TYPICAL_SCHEDULE)
def lr_schedule_properties(student, config):
    """lr_schedule warms up from max_lr/warmup_steps to max_lr, then decays to min_lr and stays there, also
    when total_steps <= warmup_steps"""
    max_lr, warmup, total, min_lr = (config[k] for k in ("max_lr", "warmup_steps", "total_steps", "min_lr"))
    end = max(total, warmup + 1)  # the first step at min_lr (p = 1)
    lrs = [student_lr(student, s, config) for s in range(end + 4)]
    call = f"lr_schedule(step, {describe(config)})"
    tol = 1e-6 * max_lr  # float32 arithmetic inside lr_schedule is fine
    if warmup > 0:
        formula = "warmup gives max_lr * (step + 1) / warmup_steps, not max_lr * step / warmup_steps"
        expect(not abs(lrs[warmup] - max_lr) <= tol < abs(lrs[warmup - 1] - max_lr),
               f"your warmup reaches its peak one step late: {call} is max_lr={max_lr:g} at step {warmup}, "
               f"not at the last warmup step {warmup - 1}, and {lrs[0]:.4g} at step 0 ({formula})")
        expect(lrs[0] > tol,
               f"{call} is {lrs[0]:.4g} at step 0: the first step must already train ({formula})")
        expect(abs(lrs[warmup - 1] - max_lr) <= tol,
               f"{call} is {lrs[warmup - 1]:.6g} at step {warmup - 1}, the last warmup step; "
               f"expected max_lr={max_lr:g} (warmup must end at exactly max_lr)")
        for s in range(1, warmup):
            expect(abs(lrs[s] - lrs[0] * (s + 1)) <= tol,
                   f"{call} is {lrs[s]:.6g} at step {s} and {lrs[0]:.6g} at step 0: "
                   f"the warmup must be linear (step s gets (s + 1) times the rate of step 0)")
    expect(abs(lrs[warmup] - max_lr) <= tol,
           f"{call} is {lrs[warmup]:.6g} at step {warmup} = warmup_steps, where the cosine starts: "
           f"expected max_lr={max_lr:g}")
    for s in range(warmup, end + 4):
        expect(lrs[s] >= min_lr - tol, f"{call} is {lrs[s]:.6g} at step {s}, below min_lr={min_lr:g}")
    where = (f"step {total} = total_steps: the cosine reaches min_lr exactly at total_steps" if total > warmup
             else f"step {end}, right after the warmup, since total_steps <= warmup_steps: (T1) divides by "
                  "max(1, total_steps - warmup_steps), so p = 1 from there on")
    expect(abs(lrs[end] - min_lr) <= tol, f"{call} is {lrs[end]:.6g} at {where}; expected min_lr={min_lr:g}")
    for s in range(end + 1, end + 4):
        expect(abs(lrs[s] - min_lr) <= tol,
               f"{call} is {lrs[s]:.6g} at step {s} > {end}: expected min_lr={min_lr:g} "
               "(clamp the cosine progress to [0, 1], so the rate stays at min_lr once it is reached)")
    for s in range(warmup, end + 3):
        expect(lrs[s + 1] <= lrs[s] + tol,
               f"{call} rises from {lrs[s]:.6g} at step {s} to {lrs[s + 1]:.6g} at step "
               f"{s + 1}: after the warmup it must only decrease")


@st.composite
def long_schedules(draw: st.DrawFn) -> dict:
    """A schedule with a long decay (10 to 60 steps after a warmup of 1 to 10), where its shape shows."""
    max_lr = draw(st.sampled_from([1.0, 3e-4, 0.1, 6e-4, 2.5]))
    warmup = draw(st.integers(1, 10))
    return {"max_lr": max_lr, "warmup_steps": warmup, "total_steps": warmup + draw(st.integers(10, 60)),
            "min_lr": max_lr * draw(st.sampled_from([0.0, 0.1, 0.5]))}


@suite.case(1, max_examples=6)
@given(config=long_schedules())
def lr_schedule_matches_definition(student, config):
    """lr_schedule follows (T1), computed here, at every step of a long schedule: the warmup, the cosine's
    shape down to min_lr, and after total_steps"""
    steps = range(config["total_steps"] + 5)
    actual = torch.tensor([student_lr(student, s, config) for s in steps], dtype=torch.float64)
    expected = torch.tensor([schedule_at(config, s) for s in steps], dtype=torch.float64)
    what = f"[lr_schedule(step, {describe(config)}) for step in range({len(steps)})]"
    expect_close(actual, expected, what, atol=1e-9 * config["max_lr"], rtol=1e-6,
                 diagnoses=lambda: schedule_variants(config, steps),
                 hint="the index is the step: warmup is max_lr * (step + 1) / warmup_steps, then (T1)'s "
                      "cosine min_lr + (max_lr - min_lr) (1 + cos(pi p)) / 2 with "
                      "p = (step - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1]")


# ---------------------------------------------------------------------------- param_groups (T2)
_KINDS = {"Embedding": "embedding", "LayerNorm": "LayerNorm", "Linear": "Linear"}


def _parameter_names(layers: list[tuple[str, tuple, dict]], local: nn.Module) -> dict[str, str]:
    """'1.weight' -> "'1.weight' (the LayerNorm weight, shape (8,))", "frozen" added where it is."""
    names = {}
    for key, p in local.named_parameters():
        index, _, attr = key.partition(".")
        kind = _KINDS[layers[int(index)][0]]
        frozen = "" if p.requires_grad else ", frozen: requires_grad=False"
        names[key] = f"'{key}' (the {kind} {attr}, shape {tuple(p.shape)}{frozen})"
    return names


def check_groups(student: Student, layers: list, seed: int, weight_decay: float,
                 frozen: tuple[int, ...] = ()) -> None:
    """param_groups on this fixture model follows (T2): two groups, every parameter in exactly one,
    decayed exactly when ndim >= 2. The layers at the indices `frozen` have requires_grad=False:
    (T2) says every parameter, so they are grouped too."""
    remote, local = twin_models(student, layers, seed)
    for index in frozen:
        remote.method("__getitem__", index).method("requires_grad_", False)
        local[index].requires_grad_(False)
    groups = student.call("trainer.param_groups", remote, weight_decay)
    expect(isinstance(groups, (list, tuple)),
           f"param_groups should return a list of dicts, got {type(groups).__name__}")
    expect(len(groups) == 2, f"param_groups returned {len(groups)} groups, expected 2 (T2): "
                             "[{'params': [...], 'weight_decay': weight_decay}, "
                             "{'params': [...], 'weight_decay': 0.0}]")
    params = dict(local.named_parameters())
    names = _parameter_names(layers, local)
    seen: dict[str, list[float]] = {key: [] for key in params}
    for g, group in enumerate(groups):
        expect(isinstance(group, dict) and "params" in group and "weight_decay" in group,
               f"group {g} should be a dict with keys 'params' and 'weight_decay', got "
               f"{sorted(group) if isinstance(group, dict) else type(group).__name__}")
        decay = expect_number(group["weight_decay"], f"group {g}['weight_decay']")
        members = group["params"]
        expect(isinstance(members, (list, tuple)),
               f"group {g}['params'] should be a list of parameters, got {type(members).__name__} "
               "(a generator such as model.parameters() or filter(...) can only be read once: "
               "make it a list)")
        for tensor in members:
            expect(isinstance(tensor, torch.Tensor), f"group {g}['params'] holds a {type(tensor).__name__}, "
                                                     "expected the model's parameters")
            match = [k for k, p in params.items()
                     if p.shape == tensor.shape and torch.equal(p.detach(), tensor)]
            expect(bool(match), f"group {g}['params'] holds a tensor of shape {tuple(tensor.shape)} that is "
                                "not one of the model's parameters (pass the Parameters themselves, "
                                "from model.parameters())")
            seen[match[0]].append(decay)
    for key, p in params.items():
        expect(seen[key], f"parameter {names[key]} is in no group: every parameter must be in exactly one"
                          + (" (T2 says every parameter, frozen ones too)" if not p.requires_grad else ""))
        expect(len(seen[key]) == 1,
               f"parameter {names[key]} is in {len(seen[key])} groups: "
               "every parameter must be in exactly one")
        wanted = weight_decay if p.ndim >= 2 else 0.0
        if abs(seen[key][0] - wanted) > 1e-12:
            if p.ndim >= 2:
                raise Failed(f"parameter {names[key]} has ndim {p.ndim} but is in the group with "
                             f"weight_decay={seen[key][0]:g}: weight decay applies to every parameter "
                             f"with ndim >= 2 (weight matrices, embeddings), "
                             f"with weight_decay={weight_decay:g}")
            raise Failed(f"parameter {names[key]} is in the group with weight_decay={seen[key][0]:g}: "
                         "no weight decay on biases and LayerNorm weights (only parameters with ndim >= 2 "
                         "are decayed; the rest go in the group with weight_decay 0.0)")


@suite.case(1)
def param_groups_split(student):
    """param_groups puts the embedding and Linear weights in the decayed group, biases and LayerNorm in the
    other, frozen parameters too"""
    check_groups(student, fixture_layers(11, 6), seed=3, weight_decay=0.1)
    check_groups(student, fixture_layers(9, 4, hidden=5), seed=4, weight_decay=0.05, frozen=(0, 1))


# ---------------------------------------------------------------------------- train (T3)
def masked_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions whose target is not IGNORE_INDEX."""
    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=IGNORE_INDEX)


def global_grad_norm(model: nn.Module) -> float:
    """The L2 norm of all the model's parameter gradients together."""
    norms = [p.grad.norm() for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms)).item()


@suite.case(1, timeout=30)
def train_contract(student):
    """train returns one loss, lr and grad_norm (before clipping) per step, trains, and leaves the model in
    eval mode"""
    layers, seed, steps = fixture_layers(7, 6), 5, 4
    kwargs = {"steps": steps, "max_lr": 0.02, "warmup_steps": 2, "min_lr": 0.001, "weight_decay": 0.1,
              "grad_clip": 0.01, "betas": (0.9, 0.95)}
    remote, local = twin_models(student, layers, seed)
    batches = make_batches(seed, steps, 7)
    history = read_history(student.call("trainer.train", remote, batches, **kwargs), steps)
    for key, values in history.items():
        expect(bool(torch.isfinite(values).all()), f"history[{key!r}] has NaN or inf: {values.tolist()}")
    for s in range(steps):
        schedule = {k: kwargs[k] for k in ("max_lr", "warmup_steps", "min_lr")} | {"total_steps": steps}
        lr = student_lr(student, s, schedule)
        expect(abs(history["lr"][s].item() - lr) <= 1e-6 * abs(lr) + 1e-12,
               f"history['lr'][{s}] is {history['lr'][s].item():.6g} but your "
               f"lr_schedule({s}, ..., total_steps=steps) gives {lr:.6g}: "
               "each step's lr comes from (T1) with total_steps=steps")
    x, y = batches[0]
    loss = masked_cross_entropy(local(x), y)
    loss.backward()
    with torch.no_grad():
        all_scored = F.cross_entropy(local(x).flatten(0, -2), y.flatten().clamp(min=0)).item()
    first = history["loss"][0].item()
    if abs(first - all_scored) <= 1e-6 * abs(all_scored) and abs(first - loss.item()) > 1e-6 * loss.item():
        raise Failed(f"history['loss'][0] is {first:.6g}, the loss over every position: "
                     f"positions with y == -100 must be ignored (expected {loss.item():.6g})")
    expect(abs(first - loss.item()) <= 1e-6 * loss.item(),
           f"history['loss'][0] is {first:.6g}, expected {loss.item():.6g}: "
           "the mean cross-entropy of the untrained model over the first batch's positions with y != -100")
    norm, logged = global_grad_norm(local), history["grad_norm"][0].item()
    if abs(logged - kwargs["grad_clip"]) <= 1e-5 and abs(logged - norm) > 1e-6 * norm:
        raise Failed(f"history['grad_norm'][0] is {logged:.6g} = grad_clip: record the gradient norm before "
                     f"clipping (expected {norm:.6g}; clip_grad_norm_ returns the norm before clipping)")
    expect(abs(logged - norm) <= 1e-6 * norm,
           f"history['grad_norm'][0] is {logged:.6g}, expected {norm:.6g}: "
           "the global L2 norm of all parameter gradients of the first loss, measured before clipping")
    trained = float64_state(remote)
    expect(any(not torch.equal(trained[k], v) for k, v in local.state_dict().items()),
           "train did not change any parameter: call optimizer.step() every step")
    _check_leaves_eval_mode(student, seed)


CLIPPINGS = {
    "global": lambda params, limit: torch.nn.utils.clip_grad_norm_(params, limit),
    "each": lambda params, limit: [torch.nn.utils.clip_grad_norm_([p], limit) for p in params],
    "value": lambda params, limit: torch.nn.utils.clip_grad_value_(params, limit),
}
"""(T3)'s clipping of the global gradient norm, and two classic readings of it (for diagnoses)."""


def adamw_steps(local: nn.Module, batches: list, lrs: list[float], *, weight_decay: float,
                grad_clip: float | None, betas: tuple[float, float], eps: float = 1e-8,
                clipping: str = "global") -> None:
    """(T3) on `local`, one step per lr: fresh gradients of the loss over y != -100, global grad-norm
    clipping (none when grad_clip is None; `clipping` picks another reading), then AdamW (torch's
    update, eps its default) with (T2)'s weight decay. Written out rather than torch.optim.AdamW,
    whose first use imports torch._dynamo: seconds of `grader check`."""
    params = list(local.parameters())
    m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    for t, ((x, y), lr) in enumerate(zip(batches, lrs, strict=False), start=1):
        local.zero_grad()
        masked_cross_entropy(local(x), y).backward()
        if grad_clip is not None:
            CLIPPINGS[clipping](params, grad_clip)
        with torch.no_grad():
            for p, m_p, v_p in zip(params, m, v, strict=True):
                m_p.lerp_(p.grad, 1 - betas[0])
                v_p.mul_(betas[1]).addcmul_(p.grad, p.grad, value=1 - betas[1])
                p.mul_(1 - lr * (weight_decay if p.ndim >= 2 else 0.0))
                denominator = (v_p / (1 - betas[1] ** t)).sqrt() + eps
                p.addcdiv_(m_p, denominator, value=-lr / (1 - betas[0] ** t))


FIRST_STEP = ("look at the step's lr (your lr_schedule), the loss over the positions with y != -100, the "
              "clipping of the global gradient norm at grad_clip, and AdamW (betas, weight decay per (T2) "
              "group)")
LATER_STEPS = ("one step matches (T3) but three do not: look at what changes from step to step (each step's "
               "own lr from (T1) with total_steps=steps, gradients that start from zero, the next batch)")


@suite.case(2, timeout=30)
def train_follows_adamw(student):
    """after 1 and after 3 steps, train's parameters are (T3)'s from the same start: your lr_schedule's lr,
    fresh gradients each step, clipping, AdamW over (T2) groups"""
    layers, seed, V = fixture_layers(7, 6, hidden=5), 8, 7
    kwargs = {"max_lr": 0.05, "warmup_steps": 0, "min_lr": 0.005, "weight_decay": 0.1, "grad_clip": 0.5,
              "betas": (0.8, 0.9)}
    batches = make_batches(seed, 3, V)
    tol = TOLERANCES[torch.float64]._asdict()
    for steps in (1, 3):
        remote, local = twin_models(student, layers, seed)
        student.call("trainer.train", remote, batches[:steps], steps=steps, **kwargs)
        schedule = {k: kwargs[k] for k in ("max_lr", "warmup_steps", "min_lr")} | {"total_steps": steps}
        lrs = [student_lr(student, s, schedule) for s in range(steps)]
        adamw_steps(local, batches, lrs, **{k: kwargs[k] for k in ("weight_decay", "grad_clip", "betas")})
        names, trained = _parameter_names(layers, local), float64_state(remote)
        call = f"train(model, batches, steps={steps}, {', '.join(f'{k}={v}' for k, v in kwargs.items())})"
        for key, expected in local.state_dict().items():
            expect_close(trained.get(key), expected, f"parameter {names[key]} after {call}", **tol,
                         hint=FIRST_STEP if steps == 1 else LATER_STEPS)


def _clipping_readings(trained_with: Callable, grad_clip: float | None) -> dict[str, dict[str, torch.Tensor]]:
    """Sentence -> the parameters a train() with that clipping mistake ends with."""
    found = {"no clipping is done": trained_with(None),
             "the gradient norm is clipped at 1.0 (a default) instead of grad_clip": trained_with(1.0)}
    if grad_clip is not None:
        found["each gradient entry is clipped to [-grad_clip, grad_clip] (clip_grad_value_) instead of the "
              "global norm"] = trained_with(grad_clip, "value")
        found["each parameter's gradient norm is clipped on its own instead of the global norm of all of "
              "them together"] = trained_with(grad_clip, "each")
    return found


def _expect_clipping(student: Student, grad_clip: float | None) -> None:
    """Two steps of train(..., grad_clip) on a fixture whose gradient norms are about 25 and 19 match
    (T3)'s, else name the clipping that they match."""
    layers, seed, V = fixture_layers(7, 6, hidden=5), 9, 7
    batches = make_batches(seed, 2, V)
    kwargs = {"steps": 2, "max_lr": 0.05, "warmup_steps": 0, "min_lr": 0.005, "weight_decay": 0.1,
              "betas": (0.8, 0.9)}
    remote, local = twin_models(student, layers, seed)
    with torch.no_grad():  # logits 10 times larger: gradient norms of 25 and 19
        local[-1].weight.mul_(10.0)
    start = {k: v.clone() for k, v in local.state_dict().items()}
    remote.load_state_dict(start)
    history = read_history(student.call("trainer.train", remote, batches, grad_clip=grad_clip, **kwargs), 2)
    schedule = {k: kwargs[k] for k in ("max_lr", "warmup_steps", "min_lr")} | {"total_steps": 2}
    lrs = [student_lr(student, s, schedule) for s in range(2)]

    def trained_with(limit: float | None, clipping: str = "global") -> dict[str, torch.Tensor]:
        """The fixture's parameters after (T3)'s two steps with this clipping."""
        local.load_state_dict(start)
        adamw_steps(local, batches, lrs, grad_clip=limit, clipping=clipping,
                    **{k: kwargs[k] for k in ("weight_decay", "betas")})
        return {k: v.clone() for k, v in local.state_dict().items()}

    readings = functools.cache(lambda: _clipping_readings(trained_with, grad_clip))  # only on a miss
    norms = ", ".join(f"{n:.3g}" for n in history["grad_norm"].tolist())
    names, trained = _parameter_names(layers, local), float64_state(remote)
    for key, expected in trained_with(grad_clip).items():
        expect_close(trained.get(key), expected, f"parameter {names[key]} after 2 steps of train(..., "
                     f"grad_clip={grad_clip}) (your gradient norms: {norms})",
                     **TOLERANCES[torch.float64]._asdict(),
                     diagnoses=lambda key=key: {s: state[key] for s, state in readings().items()},
                     hint="grad_clip=None means no clipping at all; a number means clipping the global "
                          "gradient norm at that number (clip_grad_norm_(params, grad_clip))")


@suite.case(1, timeout=30)
def train_clips_only_when_asked(student):
    """train with grad_clip=None does not clip, and with grad_clip=20 clips the global gradient norm at 20:
    the first step's (about 25), not the second's (about 19)"""
    # AdamW's step hardly changes when every gradient is scaled alike: a clipping shows where it
    # changes the ratio between two steps' gradients (clipping at 1 or 20 for both, or none).
    for grad_clip in (None, 20.0):
        _expect_clipping(student, grad_clip)


def _check_leaves_eval_mode(student: Student, seed: int) -> None:
    """A model with Dropout(0.5): right after train, its forward pass must equal the eval-mode one."""
    remote = student.call("torch.nn.Sequential", student.call("torch.nn.Embedding", 7, 16),
                          student.call("torch.nn.Dropout", 0.5), student.call("torch.nn.Linear", 16, 7))
    remote.to(torch.float64)
    student.call("trainer.train", remote, make_batches(seed, 2, 7), steps=2, max_lr=1e-3)
    x = make_batches(seed + 1, 1, 7, [(4, 8)])[0][0]
    after_train = remote(x)
    remote.eval()
    expect(torch.equal(after_train, remote(x)),
           "after train the model is still in training mode (its dropout is on): "
           "call model.eval() before returning")


# ---------------------------------------------------------------------------- evaluate
def read_evaluation(result: object) -> tuple[float, float]:
    """evaluate's (loss, accuracy), or a Failed saying what is off."""
    expect(isinstance(result, dict) and "loss" in result and "accuracy" in result,
           f"evaluate should return {{'loss': float, 'accuracy': float}}, got "
           f"{sorted(result) if isinstance(result, dict) else type(result).__name__}")
    return (expect_number(result["loss"], "evaluate(...)['loss']"),
            expect_number(result["accuracy"], "evaluate(...)['accuracy']"))


def hit_some(local: nn.Module, batches: list, seed: int) -> list:
    """Set about half the scored targets to the model's prediction, so the accuracy is not ~0."""
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for x, y in batches:
            hit = (torch.rand(y.shape, generator=g) < 0.5) & (y != IGNORE_INDEX)
            out.append((x, torch.where(hit, local(x).argmax(-1), y)))
    return out


@suite.case(1)
def evaluate_contract(student):
    """evaluate gives the mean cross-entropy and accuracy over the positions with y != -100, each counted once
    """
    V, seed = 9, 4
    remote, local = twin_models(student, fixture_layers(V, 5), seed)
    batches = hit_some(local, make_batches(seed, 2, V, [(2, 5), (1, 3)], ignore=0.4), seed)
    x, y = batches[0]
    with torch.no_grad():
        logits = local(x)
    scored = y != IGNORE_INDEX
    loss, accuracy = read_evaluation(student.call("trainer.evaluate", remote, batches[:1]))
    expected_loss = masked_cross_entropy(logits, y).item()
    expected_accuracy = (logits.argmax(-1) == y)[scored].double().mean().item()
    all_positions = F.cross_entropy(logits.flatten(0, -2), y.flatten().clamp(min=0)).item()
    if abs(loss - all_positions) <= 1e-6 * all_positions < abs(loss - expected_loss):
        raise Failed(f"evaluate on one batch gives loss {loss:.6g}, the loss over every position: "
                     f"positions with y == -100 must be ignored (expected {expected_loss:.6g})")
    expect(abs(loss - expected_loss) <= 1e-6 * expected_loss,
           f"evaluate on one batch gives loss {loss:.6g}, expected {expected_loss:.6g}: "
           "the mean cross-entropy over the positions with y != -100")
    expect(abs(accuracy - expected_accuracy) <= 1e-9,
           f"evaluate on one batch gives accuracy {accuracy:.6g}, expected {expected_accuracy:.6g}: "
           "the fraction of positions with y != -100 whose argmax prediction equals y")
    parts = [read_evaluation(student.call("trainer.evaluate", remote, [b])) for b in batches]
    counts = [int((y != IGNORE_INDEX).sum()) for _, y in batches]
    both = read_evaluation(student.call("trainer.evaluate", remote, batches))
    for i, name in enumerate(("loss", "accuracy")):
        pooled = sum(c * p[i] for c, p in zip(counts, parts, strict=True)) / sum(counts)
        expect(abs(both[i] - pooled) <= 1e-9 + 1e-6 * abs(pooled),
               f"evaluate over two batches with {counts[0]} and {counts[1]} scored positions gives {name} "
               f"{both[i]:.6g}, but {pooled:.6g} when every position counts once: average over positions, "
               "not the per-batch means")
    expect(all(torch.equal(v, local.state_dict()[k]) for k, v in float64_state(remote).items()),
           "evaluate changed the model's parameters")
    _check_evaluates_in_eval_mode(student, seed)


def _check_evaluates_in_eval_mode(student: Student, seed: int) -> None:
    """A model with Dropout(0.5) left in train mode: evaluate must switch it to eval mode."""
    layers = [("Embedding", (7, 16), {}), ("Dropout", (0.5,), {}), ("Linear", (16, 7), {})]
    remote, local = twin_models(student, layers, seed)
    remote.train()
    batches = make_batches(seed, 2, 7, [(3, 6), (2, 5)])
    loss, _ = read_evaluation(student.call("trainer.evaluate", remote, batches))
    with torch.no_grad():
        expected = _pooled_loss(local.eval(), batches)
    expect(abs(loss - expected) <= 1e-6 * expected,
           f"evaluate gives loss {loss:.6g} on a model with Dropout(0.5) that was in train mode, "
           f"{expected:.6g} in eval mode: call model.eval() inside evaluate, so dropout is off")


def _pooled_loss(model: nn.Module, batches: list) -> float:
    """Mean cross-entropy over every scored position of all batches (the SPEC definition)."""
    logits = torch.cat([model(x).flatten(0, -2) for x, _ in batches])
    targets = torch.cat([y.flatten() for _, y in batches])
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX).item()

