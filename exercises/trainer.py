# Generated from solutions/trainer.py by `grader release-stubs` (stub 10c1845c9f57): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
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
    raise NotImplementedError("lr_schedule: your code here (see the docstring)")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW parameter groups (T2): weight decay on matrices and embeddings only.

    [{"params": [every parameter with ndim >= 2], "weight_decay": weight_decay},
     {"params": [every other parameter (biases, LayerNorm gains)], "weight_decay": 0.0}]
    Each parameter lands in exactly one group. Pitfall: decaying biases and LayerNorm weights.
    """
    raise NotImplementedError("param_groups: your code here (see the docstring)")


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
    raise NotImplementedError("train: your code here (see the docstring)")


def evaluate(model: nn.Module, batches: Iterable[Batch]) -> dict:
    """{"loss": mean cross-entropy, "accuracy": token accuracy} over every position with
    y != -100 across all batches (each position counts once), in eval mode, without gradients.
    Raises ValueError when no position is scored.
    Pitfall: averaging per-batch means (batches with fewer scored positions weigh too much).
    """
    raise NotImplementedError("evaluate: your code here (see the docstring)")
