"""Training: warmup + cosine learning-rate schedule, AdamW parameter groups, the loop, evaluation."""
import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


def lr_schedule(step: int, *, max_lr: float, warmup_steps: int, total_steps: int,
                min_lr: float = 0.0) -> float:
    """The learning rate at `step` (counted from 0): linear warmup, then cosine decay (T1).

        step < warmup_steps:  max_lr * (step + 1) / warmup_steps
        otherwise:            min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * p)),
                              p = clamp((step - warmup_steps) / max(1, total_steps - warmup_steps), 0, 1)

    So the first step already trains (max_lr / warmup_steps, not 0), warmup ends at exactly
    max_lr, and the rate never goes below min_lr, even past total_steps.
    Pitfall: max_lr * step / warmup_steps (off by one: step 0 learns nothing).
    """
    # BEGIN SOLUTION
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
    # END SOLUTION


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW parameter groups (T2): weight decay on matrices and embeddings only.

    [{"params": [every parameter with ndim >= 2], "weight_decay": weight_decay},
     {"params": [every other parameter (biases, LayerNorm gains)], "weight_decay": 0.0}]
    Each parameter lands in exactly one group. Pitfall: decaying biases and LayerNorm weights.
    """
    # BEGIN SOLUTION
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    # END SOLUTION


def train(model: nn.Module, batches: Iterable[Batch], *, steps: int, max_lr: float,
          warmup_steps: int = 0, min_lr: float = 0.0, weight_decay: float = 0.1,
          grad_clip: float | None = 1.0, betas: tuple[float, float] = (0.9, 0.95)) -> dict:
    """Train `model` for `steps` steps on `batches` of (x, y) int64 (B, T) (T3).

    Each step: set the learning rate from lr_schedule (total_steps=steps) on every parameter
    group; loss = mean cross-entropy of model(x) against y, ignoring positions where y == -100;
    backward; clip the global gradient norm at grad_clip (no clipping when None); one AdamW step
    over param_groups(model, weight_decay) with betas. Training stops early if `batches` runs out.
    Returns {"loss": [...], "lr": [...], "grad_norm": [...]}, one float per step, the gradient
    norm measured BEFORE clipping. Leaves the model in eval mode.
    Pitfalls: forgetting optimizer.zero_grad() (gradients accumulate); computing the lr but
    never writing it into optimizer.param_groups; logging the norm after clipping.
    """
    # BEGIN SOLUTION
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay), lr=max_lr, betas=betas)
    max_norm = float("inf") if grad_clip is None else grad_clip
    device = next(model.parameters()).device
    history = {"loss": [], "lr": [], "grad_norm": []}
    model.train()
    for step, (x, y) in zip(range(steps), batches, strict=False):
        lr = lr_schedule(step, max_lr=max_lr, warmup_steps=warmup_steps,
                         total_steps=steps, min_lr=min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # With max_norm=inf this only measures; it always returns the norm before clipping.
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        history["loss"].append(loss.item())
        history["lr"].append(lr)
        history["grad_norm"].append(grad_norm.item())
    model.eval()
    return history
    # END SOLUTION


def evaluate(model: nn.Module, batches: Iterable[Batch]) -> dict:
    """{"loss": mean cross-entropy, "accuracy": token accuracy} over every position with
    y != -100 across all batches (each position counts once), in eval mode, without gradients.
    Raises ValueError when no position is scored.
    Pitfall: averaging per-batch means (batches with fewer scored positions weigh too much).
    """
    # BEGIN SOLUTION
    model.eval()
    device = next(model.parameters()).device
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            scored = y != -100
            total_loss += F.cross_entropy(logits[scored], y[scored], reduction="sum").item()
            correct += (logits.argmax(-1)[scored] == y[scored]).sum().item()
            count += scored.sum().item()
    if count == 0:
        raise ValueError("no position with y != -100 to evaluate")
    return {"loss": total_loss / count, "accuracy": correct / count}
    # END SOLUTION
