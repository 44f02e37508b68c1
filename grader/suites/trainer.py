"""trainer.py: lr_schedule (T1), param_groups (T2), train (T3), evaluate (15 points).

Every model here is built from torch's own layers (the worker's fixtures), never from the
student's other files, so this component is graded on its own. The judge builds a twin of each
fixture model and loads the same parameters into both; float64 throughout.
"""
import math

import torch
import torch.nn.functional as F
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from torch import nn

from ..reference import ref
from . import Suite
from .checks import Failed, expect, expect_close
from .strategies import randn, seeds

suite = Suite("trainer")
IGNORE = -100
HISTORY_KEYS = ("loss", "lr", "grad_norm")
# Training runs cost a few ms each and their diagnoses a dozen more: find a failing example,
# report it, and skip hypothesis's shrinking (which would retrain the model dozens of times).
NO_SHRINK = (Phase.explicit, Phase.generate)


# ---------------------------------------------------------------------------- fixtures
def _layers(V: int, d: int, hidden: int | None = None, bias: bool = True,
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


def _local_model(layers: list[tuple[str, tuple, dict]], seed: int) -> nn.Module:
    """The judge's fixture model, float64, every parameter moved away from its initial value
    (so no two are equal and LayerNorm gains and biases are not 1 and 0)."""
    torch.manual_seed(seed)
    local = nn.Sequential(*(getattr(nn, name)(*args, **kwargs) for name, args, kwargs in layers)).double()
    with torch.no_grad():
        for i, p in enumerate(local.parameters()):
            p.add_(0.2 * randn(seed + 7 * i + 1, *p.shape))
    return local


def _twin_models(student, layers: list[tuple[str, tuple, dict]], seed: int) -> tuple:
    """The fixture model in the worker (a Remote) and its twin here, float64, same parameters."""
    local = _local_model(layers, seed)
    remote = student.call("torch.nn.Sequential",
                          *(student.call(f"torch.nn.{name}", *args, **kwargs) for name, args, kwargs in layers))
    remote.to(torch.float64)  # before loading, so that float64 values are not rounded to float32
    remote.load_state_dict(local.state_dict())
    return remote, local


def _batches(seed: int, n: int, V: int, shapes: list[tuple[int, int]] | None = None,
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
        out.append((x, y.masked_fill(drop, IGNORE)))
    return out


def _number(value: object, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    expect(isinstance(value, (int, float)) and not isinstance(value, bool),
           f"{what} should be a float, got {type(value).__name__}")
    return float(value)


def _floats(values: object, n: int, what: str) -> torch.Tensor:
    expect(isinstance(values, (list, tuple)), f"{what} should be a list of floats, got {type(values).__name__}")
    expect(len(values) == n, f"{what} has {len(values)} entries, expected {n} (one per step)")
    return torch.tensor([_number(v, f"{what}[{i}]") for i, v in enumerate(values)], dtype=torch.float64)


def _history(result: object, steps: int) -> dict[str, torch.Tensor]:
    expect(isinstance(result, dict), f"train should return a dict, got {type(result).__name__}")
    missing = [k for k in HISTORY_KEYS if k not in result]
    expect(not missing, f"train's history has no {missing}: it must hold 'loss', 'lr' and 'grad_norm'")
    return {k: _floats(result[k], steps, f"history[{k!r}]") for k in HISTORY_KEYS}


def _state(remote) -> dict[str, torch.Tensor]:
    return {k: v.to(torch.float64) for k, v in remote.state_dict().items()}


# ---------------------------------------------------------------------------- lr_schedule (T1)
@st.composite
def schedules(draw: st.DrawFn) -> dict:
    """max_lr, warmup_steps, total_steps > warmup_steps and min_lr <= max_lr."""
    max_lr = draw(st.sampled_from([1.0, 3e-4, 0.1, 6e-4, 2.5]))
    warmup = draw(st.integers(0, 6))
    total = warmup + draw(st.integers(1, 14))
    min_lr = max_lr * draw(st.sampled_from([0.0, 0.1, 0.5]))
    return {"max_lr": max_lr, "warmup_steps": warmup, "total_steps": total, "min_lr": min_lr}


def _schedule_call(student, step: int, config: dict) -> float:
    value = student.call("trainer.lr_schedule", step, **config)
    return _number(value, f"lr_schedule({step}, ...)")


def _describe(config: dict) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in config.items())


@suite.case(2, public=True)
@given(config=schedules())
def lr_schedule_properties(student, config):
    """lr_schedule warms up from max_lr/warmup_steps to max_lr, then decays to min_lr and stays there"""
    max_lr, warmup, total, min_lr = (config[k] for k in ("max_lr", "warmup_steps", "total_steps", "min_lr"))
    lrs = [_schedule_call(student, s, config) for s in range(total + 4)]
    call = f"lr_schedule(step, {_describe(config)})"
    tol = 1e-6 * max_lr  # float32 arithmetic inside lr_schedule is fine
    if warmup > 0:
        expect(lrs[0] > tol, f"{call} is {lrs[0]:.4g} at step 0: the first step must already train "
                             f"(warmup gives max_lr * (step + 1) / warmup_steps, not max_lr * step / warmup_steps)")
        expect(abs(lrs[warmup - 1] - max_lr) <= tol,
               f"{call} is {lrs[warmup - 1]:.6g} at step {warmup - 1}, the last warmup step; "
               f"expected max_lr={max_lr:g} "
               "(warmup must end at exactly max_lr: is the warmup off by one?)")
        for s in range(1, warmup):
            expect(abs(lrs[s] - lrs[0] * (s + 1)) <= tol,
                   f"{call} is {lrs[s]:.6g} at step {s} and {lrs[0]:.6g} at step 0: the warmup must be linear "
                   f"(step s gets (s + 1) times the rate of step 0)")
    expect(abs(lrs[warmup] - max_lr) <= tol,
           f"{call} is {lrs[warmup]:.6g} at step {warmup} = warmup_steps, where the cosine starts: "
           f"expected max_lr={max_lr:g}")
    for s in range(warmup, total + 4):
        expect(lrs[s] >= min_lr - tol, f"{call} is {lrs[s]:.6g} at step {s}, below min_lr={min_lr:g}")
    expect(abs(lrs[total] - min_lr) <= tol,
           f"{call} is {lrs[total]:.6g} at step {total} = total_steps: expected min_lr={min_lr:g} "
           "(the cosine reaches min_lr exactly at total_steps)")
    for s in range(total + 1, total + 4):
        expect(abs(lrs[s] - min_lr) <= tol,
               f"{call} is {lrs[s]:.6g} at step {s} > total_steps: expected min_lr={min_lr:g} "
               "(clamp the cosine progress to [0, 1], so the rate stays at min_lr past total_steps)")
    for s in range(warmup, total + 3):
        expect(lrs[s + 1] <= lrs[s] + tol, f"{call} rises from {lrs[s]:.6g} at step {s} to {lrs[s + 1]:.6g} at step "
                                           f"{s + 1}: after the warmup it must only decrease")


def _schedule_variants(config: dict, steps: range) -> dict[str, torch.Tensor]:
    """What classic mistakes in (T1) return at these steps (computed here, never shown)."""
    max_lr, warmup, total, min_lr = (config[k] for k in ("max_lr", "warmup_steps", "total_steps", "min_lr"))

    def schedule(s, shift=1, clamp=True, floor=min_lr, start=warmup, span=None):
        if s < warmup:
            return max_lr * (s + shift) / warmup
        p = (s - start) / (span or max(1, total - warmup))
        if clamp:
            p = min(max(p, 0.0), 1.0)
        return floor + 0.5 * (max_lr - floor) * (1 + math.cos(math.pi * p))

    def at(**kw):
        return torch.tensor([schedule(s, **kw) for s in steps], dtype=torch.float64)

    return {
        "the warmup is off by one (max_lr * step / warmup_steps: step 0 gets 0)": at(shift=0),
        "the cosine progress is not clamped (past total_steps the rate rises again)": at(clamp=False),
        "the cosine decays to 0 instead of to min_lr": at(floor=0.0),
        "the cosine progress is counted from step 0 instead of from warmup_steps": at(start=0, span=max(1, total)),
        "the cosine progress is divided by total_steps instead of total_steps - warmup_steps": at(span=max(1, total)),
    }


@suite.case(2)
@given(config=schedules(), extra=st.integers(0, 6))
def lr_schedule_matches_reference(student, config, extra):
    """lr_schedule follows (T1) at every step, during warmup, decay and past total_steps"""
    steps = range(config["total_steps"] + 1 + extra)
    actual = torch.tensor([_schedule_call(student, s, config) for s in steps], dtype=torch.float64)
    expected = torch.tensor([ref.trainer.lr_schedule(s, **config) for s in steps], dtype=torch.float64)
    expect_close(actual, expected, f"[lr_schedule(step, {_describe(config)}) for step in range({len(steps)})]",
                 atol=1e-9 * config["max_lr"], rtol=1e-6, diagnoses=_schedule_variants(config, steps),
                 hint="the index is the step: warmup is max_lr * (step + 1) / warmup_steps, then the cosine (T1)")


# ---------------------------------------------------------------------------- param_groups (T2)
_KINDS = {"Embedding": "embedding", "LayerNorm": "LayerNorm", "Linear": "Linear"}


def _parameter_names(layers: list[tuple[str, tuple, dict]], local: nn.Module) -> dict[str, str]:
    """'1.weight' -> "'1.weight' (the LayerNorm weight, shape (8,))"."""
    names = {}
    for key, p in local.named_parameters():
        index, _, attr = key.partition(".")
        kind = _KINDS[layers[int(index)][0]]
        names[key] = f"'{key}' (the {kind} {attr}, shape {tuple(p.shape)})"
    return names


def _check_groups(student, layers: list, seed: int, weight_decay: float) -> None:
    remote, local = _twin_models(student, layers, seed)
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
        decay = _number(group["weight_decay"], f"group {g}['weight_decay']")
        members = group["params"]
        expect(isinstance(members, (list, tuple)),
               f"group {g}['params'] should be a list of parameters, got {type(members).__name__} "
               "(a generator such as model.parameters() or filter(...) can only be read once: make it a list)")
        for tensor in members:
            expect(isinstance(tensor, torch.Tensor), f"group {g}['params'] holds a {type(tensor).__name__}, "
                                                     "expected the model's parameters")
            match = [k for k, p in params.items() if p.shape == tensor.shape and torch.equal(p.detach(), tensor)]
            expect(bool(match), f"group {g}['params'] holds a tensor of shape {tuple(tensor.shape)} that is not one "
                                f"of the model's parameters (pass the Parameters themselves, from model.parameters())")
            seen[match[0]].append(decay)
    for key, p in params.items():
        expect(seen[key], f"parameter {names[key]} is in no group: every parameter must be in exactly one")
        expect(len(seen[key]) == 1, f"parameter {names[key]} is in {len(seen[key])} groups: every parameter must "
                                    "be in exactly one")
        wanted = weight_decay if p.ndim >= 2 else 0.0
        if abs(seen[key][0] - wanted) > 1e-12:
            if p.ndim >= 2:
                raise Failed(f"parameter {names[key]} has ndim {p.ndim} but is in the group with weight_decay="
                             f"{seen[key][0]:g}: weight decay applies to every parameter with ndim >= 2 "
                             f"(weight matrices, embeddings), with weight_decay={weight_decay:g}")
            raise Failed(f"parameter {names[key]} is in the group with weight_decay={seen[key][0]:g}: no weight decay "
                         "on biases and LayerNorm weights (only parameters with ndim >= 2 are decayed; the rest go "
                         "in the group with weight_decay 0.0)")


@suite.case(1, public=True)
def param_groups_split(student):
    """param_groups puts the embedding and Linear weights in the decayed group, biases and LayerNorm in the other"""
    _check_groups(student, _layers(11, 6), seed=3, weight_decay=0.1)


@suite.case(2)
@given(V=st.integers(2, 9), d=st.integers(2, 8), hidden=st.one_of(st.none(), st.integers(1, 7)),
       bias=st.booleans(), norm=st.booleans(), weight_decay=st.sampled_from([0.1, 0.01, 0.5]), seed=seeds)
def param_groups_matches_rule(student, V, d, hidden, bias, norm, weight_decay, seed):
    """param_groups splits every model's parameters by (T2): ndim >= 2 decayed, the rest not, each exactly once"""
    _check_groups(student, _layers(V, d, hidden, bias, norm), seed, weight_decay)


# ---------------------------------------------------------------------------- train (T3)
def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=IGNORE)


def _grad_norm(model: nn.Module) -> float:
    norms = [p.grad.norm() for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms)).item()


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
    for step, (x, y) in zip(range(steps), batches):
        lr = ref.trainer.lr_schedule(step, max_lr=max_lr, warmup_steps=warmup_steps,
                                     total_steps=steps, min_lr=min_lr)
        if bug != "lr_never_set":
            for group in optimizer.param_groups:
                group["lr"] = lr
        logits = model(x)
        if bug == "no_ignore":
            loss = F.cross_entropy(logits.flatten(0, -2), y.flatten().clamp(min=0))
        elif bug == "all_positions":
            loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=IGNORE,
                                   reduction="sum") / y.numel()
        else:
            loss = _cross_entropy(logits, y)
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        loss.backward()
        norm = _grad_norm(model)
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
    "no_ignore": "positions with y == -100 are not ignored in the loss (use ignore_index=-100, or mask them out)",
    "all_positions": "the loss is divided by every position, -100 ones included, instead of by the scored ones",
    "no_zero_grad": "the gradients are never zeroed (optimizer.zero_grad() missing: they accumulate across steps)",
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
                model = _local_model(self.layers, self.seed)
                self._runs[sentence] = _variant_train(model, self.batches, bug, **self.kwargs)
        return self._runs

    def history(self, key: str) -> dict[str, torch.Tensor]:
        return {sentence: history[key] for sentence, (history, _) in self.runs().items()}

    def parameter(self, key: str) -> dict[str, torch.Tensor]:
        return {sentence: state[key] for sentence, (_, state) in self.runs().items()}


def _close_or_diagnose(actual: torch.Tensor, expected: torch.Tensor, what: str, variants, *,
                       atol: float, rtol: float, hint: str) -> None:
    """expect_close, computing the diagnoses (training runs) only when the values differ."""
    try:
        expect_close(actual, expected, what, atol=atol, rtol=rtol)
    except Failed:
        expect_close(actual, expected, what, atol=atol, rtol=rtol, hint=hint, diagnoses=variants())


@st.composite
def train_configs(draw: st.DrawFn) -> dict:
    steps = draw(st.integers(3, 7))
    return {"steps": steps, "max_lr": draw(st.sampled_from([0.01, 0.03, 0.003])),
            "warmup_steps": draw(st.integers(0, steps - 1)),
            "min_lr": draw(st.sampled_from([0.0, 0.001])),
            "weight_decay": draw(st.sampled_from([0.1, 0.5, 0.0])),
            "grad_clip": draw(st.sampled_from([0.05, None, 1.0, 0.3])),
            "betas": draw(st.sampled_from([(0.9, 0.95), (0.8, 0.99)]))}


@suite.case(1, public=True, timeout=30)
def train_contract(student):
    """train returns one loss, lr and grad_norm (before clipping) per step, trains, and leaves the model in eval mode"""
    layers, seed, steps = _layers(7, 6), 5, 4
    kwargs = {"steps": steps, "max_lr": 0.02, "warmup_steps": 2, "min_lr": 0.001, "weight_decay": 0.1,
              "grad_clip": 0.01, "betas": (0.9, 0.95)}
    remote, local = _twin_models(student, layers, seed)
    batches = _batches(seed, steps, 7)
    history = _history(student.call("trainer.train", remote, batches, **kwargs), steps)
    for key, values in history.items():
        expect(bool(torch.isfinite(values).all()), f"history[{key!r}] has NaN or inf: {values.tolist()}")
    for s in range(steps):
        schedule = {k: kwargs[k] for k in ("max_lr", "warmup_steps", "min_lr")} | {"total_steps": steps}
        lr = _schedule_call(student, s, schedule)
        expect(abs(history["lr"][s].item() - lr) <= 1e-6 * abs(lr) + 1e-12,
               f"history['lr'][{s}] is {history['lr'][s].item():.6g} but your lr_schedule({s}, ..., total_steps=steps) "
               f"gives {lr:.6g}: each step's lr comes from (T1) with total_steps=steps")
    x, y = batches[0]
    loss = _cross_entropy(local(x), y)
    loss.backward()
    with torch.no_grad():
        all_scored = F.cross_entropy(local(x).flatten(0, -2), y.flatten().clamp(min=0)).item()
    first = history["loss"][0].item()
    if abs(first - all_scored) <= 1e-6 * abs(all_scored) and abs(first - loss.item()) > 1e-6 * loss.item():
        raise Failed(f"history['loss'][0] is {first:.6g}, the loss over every position: positions with y == -100 "
                     f"must be ignored (expected {loss.item():.6g})")
    expect(abs(first - loss.item()) <= 1e-6 * loss.item(),
           f"history['loss'][0] is {first:.6g}, expected {loss.item():.6g}: the mean cross-entropy of the untrained "
           "model over the first batch's positions with y != -100")
    norm, logged = _grad_norm(local), history["grad_norm"][0].item()
    if abs(logged - kwargs["grad_clip"]) <= 1e-5 and abs(logged - norm) > 1e-6 * norm:
        raise Failed(f"history['grad_norm'][0] is {logged:.6g} = grad_clip: record the gradient norm before "
                     f"clipping (expected {norm:.6g}; clip_grad_norm_ returns the norm before clipping)")
    expect(abs(logged - norm) <= 1e-6 * norm,
           f"history['grad_norm'][0] is {logged:.6g}, expected {norm:.6g}: the global L2 norm of all parameter "
           "gradients of the first loss, measured before clipping")
    trained = _state(remote)
    expect(any(not torch.equal(trained[k], v) for k, v in local.state_dict().items()),
           "train did not change any parameter: call optimizer.step() every step")
    _check_leaves_eval_mode(student, seed)


def _check_leaves_eval_mode(student, seed: int) -> None:
    """A model with Dropout(0.5): right after train, its forward pass must equal the eval-mode one."""
    remote = student.call("torch.nn.Sequential", student.call("torch.nn.Embedding", 7, 16),
                          student.call("torch.nn.Dropout", 0.5), student.call("torch.nn.Linear", 16, 7))
    remote.to(torch.float64)
    student.call("trainer.train", remote, _batches(seed, 2, 7), steps=2, max_lr=1e-3)
    x = _batches(seed + 1, 1, 7, [(4, 8)])[0][0]
    after_train = remote(x)
    remote.eval()
    expect(torch.equal(after_train, remote(x)),
           "after train the model is still in training mode (its dropout is on): call model.eval() before returning")


@suite.case(4, timeout=30)
@settings(max_examples=6, phases=NO_SHRINK)
@example(config={"steps": 6, "max_lr": 0.03, "warmup_steps": 2, "min_lr": 0.001, "weight_decay": 0.1,
                 "grad_clip": 0.05, "betas": (0.8, 0.99)}, V=7, d=6, seed=11)
@given(config=train_configs(), V=st.integers(3, 9), d=st.integers(2, 8), seed=seeds)
def train_matches_reference(student, config, V, d, seed):
    """train's history (loss, lr, grad_norm) and final parameters equal (T3)'s, with -100 targets and clipping"""
    layers = _layers(V, d, hidden=d + 1)
    steps = config["steps"]
    remote, local = _twin_models(student, layers, seed)
    batches = _batches(seed, steps, V, [(1 + (seed + b) % 3, 3 + (seed + b) % 4) for b in range(steps)])
    history = _history(student.call("trainer.train", remote, batches, **config), steps)
    expected = ref.trainer.train(local, batches, **config)
    try:
        _compare_training(history, expected, _state(remote), local.state_dict(),
                          _Variants(layers, seed, batches, config), config)
    except Failed as error:  # name the setting: it decides which mistakes can show
        setting = ", ".join(f"{k}={v}" for k, v in config.items())
        raise Failed(f"{error} [train(model, batches, {setting}), {len(batches)} batches with some y == -100]") \
            from None


def _compare_training(history: dict, expected: dict, trained: dict, expected_state: dict,
                      variants: _Variants, config: dict) -> None:
    steps = config["steps"]
    expect_close(history["lr"], torch.tensor(expected["lr"], dtype=torch.float64), "history['lr']",
                 atol=1e-9 * config["max_lr"], rtol=1e-6,
                 diagnoses=_schedule_variants({k: config[k] for k in ("max_lr", "warmup_steps", "min_lr")}
                                              | {"total_steps": steps}, range(steps)),
                 hint="step t trains with lr_schedule(t, ..., total_steps=steps) (T1)")
    _close_or_diagnose(history["loss"], torch.tensor(expected["loss"], dtype=torch.float64), "history['loss']",
                       lambda: variants.history("loss"), atol=1e-9, rtol=1e-6,
                       hint="the index is the step: loss = mean cross-entropy over y != -100, then backward, clip, "
                            "AdamW step over param_groups")
    expected_norm = torch.tensor(expected["grad_norm"], dtype=torch.float64)
    after_clipping = {}
    if config["grad_clip"] is not None:
        after_clipping["the norm is recorded after clipping (record it before: clip_grad_norm_ returns it)"] = \
            expected_norm.clamp(max=config["grad_clip"])
    _close_or_diagnose(history["grad_norm"], expected_norm, "history['grad_norm']",
                       lambda: after_clipping | variants.history("grad_norm"), atol=1e-9, rtol=1e-6,
                       hint="the global L2 norm of every parameter's gradient, measured before clipping")
    for key, value in expected_state.items():
        expect(key in trained, f"the model lost its parameter {key!r} during train")
        _close_or_diagnose(trained[key], value, f"parameter {key!r} after train", lambda: variants.parameter(key),
                           atol=1e-7, rtol=1e-5,
                           hint="every step: set the lr on every group, zero_grad, backward, clip, step")


# ---------------------------------------------------------------------------- evaluate
def _evaluation(result: object) -> tuple[float, float]:
    expect(isinstance(result, dict) and "loss" in result and "accuracy" in result,
           f"evaluate should return {{'loss': float, 'accuracy': float}}, got "
           f"{sorted(result) if isinstance(result, dict) else type(result).__name__}")
    return _number(result["loss"], "evaluate(...)['loss']"), _number(result["accuracy"], "evaluate(...)['accuracy']")


def _hit_some(local: nn.Module, batches: list, seed: int) -> list:
    """Set about half the scored targets to the model's prediction, so the accuracy is not ~0."""
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for x, y in batches:
            hit = (torch.rand(y.shape, generator=g) < 0.5) & (y != IGNORE)
            out.append((x, torch.where(hit, local(x).argmax(-1), y)))
    return out


@suite.case(1, public=True)
def evaluate_contract(student):
    """evaluate gives the mean cross-entropy and accuracy over the positions with y != -100, each counted once"""
    V, seed = 9, 4
    remote, local = _twin_models(student, _layers(V, 5), seed)
    batches = _hit_some(local, _batches(seed, 2, V, [(2, 5), (1, 3)], ignore=0.4), seed)
    x, y = batches[0]
    with torch.no_grad():
        logits = local(x)
    scored = y != IGNORE
    loss, accuracy = _evaluation(student.call("trainer.evaluate", remote, batches[:1]))
    expected_loss = _cross_entropy(logits, y).item()
    expected_accuracy = (logits.argmax(-1) == y)[scored].double().mean().item()
    all_positions = F.cross_entropy(logits.flatten(0, -2), y.flatten().clamp(min=0)).item()
    if abs(loss - all_positions) <= 1e-6 * all_positions < abs(loss - expected_loss):
        raise Failed(f"evaluate on one batch gives loss {loss:.6g}, the loss over every position: positions with "
                     f"y == -100 must be ignored (expected {expected_loss:.6g})")
    expect(abs(loss - expected_loss) <= 1e-6 * expected_loss,
           f"evaluate on one batch gives loss {loss:.6g}, expected {expected_loss:.6g}: the mean cross-entropy "
           "over the positions with y != -100")
    expect(abs(accuracy - expected_accuracy) <= 1e-9,
           f"evaluate on one batch gives accuracy {accuracy:.6g}, expected {expected_accuracy:.6g}: the fraction of "
           "positions with y != -100 whose argmax prediction equals y")
    parts = [_evaluation(student.call("trainer.evaluate", remote, [b])) for b in batches]
    counts = [int((y != IGNORE).sum()) for _, y in batches]
    both = _evaluation(student.call("trainer.evaluate", remote, batches))
    for i, name in enumerate(("loss", "accuracy")):
        pooled = sum(c * p[i] for c, p in zip(counts, parts)) / sum(counts)
        expect(abs(both[i] - pooled) <= 1e-9 + 1e-6 * abs(pooled),
               f"evaluate over two batches with {counts[0]} and {counts[1]} scored positions gives {name} "
               f"{both[i]:.6g}, but {pooled:.6g} when every position counts once: average over positions, "
               "not the per-batch means")
    expect(all(torch.equal(v, local.state_dict()[k]) for k, v in _state(remote).items()),
           "evaluate changed the model's parameters")
    _check_evaluates_in_eval_mode(student, seed)


def _check_evaluates_in_eval_mode(student, seed: int) -> None:
    """A model with Dropout(0.5) left in train mode: evaluate must switch it to eval mode."""
    layers = [("Embedding", (7, 16), {}), ("Dropout", (0.5,), {}), ("Linear", (16, 7), {})]
    remote, local = _twin_models(student, layers, seed)
    remote.train()
    batches = _batches(seed, 2, 7, [(3, 6), (2, 5)])
    loss, _ = _evaluation(student.call("trainer.evaluate", remote, batches))
    with torch.no_grad():
        expected = _pooled_loss(local.eval(), batches)
    expect(abs(loss - expected) <= 1e-6 * expected,
           f"evaluate gives loss {loss:.6g} on a model with Dropout(0.5) that was in train mode, {expected:.6g} in "
           "eval mode: call model.eval() inside evaluate, so dropout is off")


def _pooled_loss(model: nn.Module, batches: list) -> float:
    """Mean cross-entropy over every scored position of all batches (the SPEC definition)."""
    logits = torch.cat([model(x).flatten(0, -2) for x, _ in batches])
    return F.cross_entropy(logits, torch.cat([y.flatten() for _, y in batches]), ignore_index=IGNORE).item()


def _evaluate_variants(local: nn.Module, batches: list) -> dict[str, tuple[float, float]]:
    with torch.no_grad():
        per_batch, nll, hits, count, all_nll, all_hits, all_count = [], 0.0, 0, 0, 0.0, 0, 0
        for x, y in batches:
            logits, scored = local(x), y != IGNORE
            ce = F.cross_entropy(logits[scored], y[scored], reduction="sum").item()
            hit = (logits.argmax(-1) == y)[scored].sum().item()
            per_batch.append((ce / scored.sum().item(), hit / scored.sum().item()))
            nll, hits, count = nll + ce, hits + hit, count + scored.sum().item()
            all_nll += F.cross_entropy(logits.flatten(0, -2), y.flatten().clamp(min=0), reduction="sum").item()
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
@given(V=st.integers(3, 9), d=st.integers(2, 8), sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(2, 6)),
                                                                 min_size=2, max_size=4), seed=seeds)
def evaluate_matches_reference(student, V, d, sizes, seed):
    """evaluate over batches of unequal sizes with -100 targets gives the loss and accuracy over all scored positions"""
    remote, local = _twin_models(student, _layers(V, d), seed)
    batches = _hit_some(local, _batches(seed, len(sizes), V, sizes, ignore=0.4), seed)
    loss, accuracy = _evaluation(student.call("trainer.evaluate", remote, batches))
    expected = ref.trainer.evaluate(local, batches)
    variants = _evaluate_variants(local, batches)
    for i, (name, value) in enumerate((("loss", loss), ("accuracy", accuracy))):
        expect_close(torch.tensor(value, dtype=torch.float64), torch.tensor(expected[name], dtype=torch.float64),
                     f"evaluate(...)[{name!r}]", atol=1e-9, rtol=1e-6,
                     diagnoses={s: torch.tensor(v[i], dtype=torch.float64) for s, v in variants.items()},
                     hint="mean over every position with y != -100 across all batches, in eval mode without gradients")
