"""Training: learning-rate schedule, AdamW parameter groups, the training loop, evaluation."""
import math
from collections.abc import Iterable

import torch
from torch import nn

IGNORE = -100


def lr_schedule(step: int, *, max_lr: float, warmup_steps: int, total_steps: int,
                min_lr: float = 0.0) -> float:
    """(T1) Linear warmup to max_lr over warmup_steps, then cosine decay to min_lr."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / decay_steps))
    coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
    return min_lr + coeff * (max_lr - min_lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """(T2) AdamW groups: weight decay on matrices/embeddings (ndim >= 2), none on the rest."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # noqa: B007 (bugs.py's variants read `name`)
        if p.ndim >= 2:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def _nll(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over the positions with y != -100, and how many there are."""
    scored = y != IGNORE
    logp = torch.log_softmax(logits, dim=-1)
    target_logp = logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -torch.where(scored, target_logp, 0.0).sum(), scored.sum()


def _grad_norm(params: list[nn.Parameter]) -> torch.Tensor:
    """Global L2 norm of all gradients, i.e. the norm of the per-tensor norms."""
    norms = [torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms))


def train(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *, steps: int,
          max_lr: float, warmup_steps: int = 0, min_lr: float = 0.0, weight_decay: float = 0.1,
          grad_clip: float | None = 1.0, betas: tuple[float, float] = (0.9, 0.95)) -> dict:
    """(T3) AdamW with warmup + cosine lr and global grad-norm clipping; returns the history."""
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay), lr=max_lr, betas=betas)
    history = {"loss": [], "lr": [], "grad_norm": []}
    model.train()
    batch_iter = iter(batches)
    for step in range(steps):
        try:
            x, y = next(batch_iter)
        except StopIteration:
            break
        lr = lr_schedule(step, max_lr=max_lr, warmup_steps=warmup_steps,
                         total_steps=steps, min_lr=min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = x.to(device), y.to(device)
        nll, count = _nll(model(x), y)
        loss = nll / count
        optimizer.zero_grad()
        loss.backward()
        grad_norm = _grad_norm(params)
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        history["loss"].append(loss.item())
        history["lr"].append(lr)
        history["grad_norm"].append(grad_norm.item())
    model.eval()
    return history


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """Mean cross-entropy and accuracy over every position with y != -100, in eval mode."""
    model.eval()
    device = next(model.parameters()).device
    sums, hits, counts = [], [], []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        logits = model(x)
        nll, count = _nll(logits, y)
        sums.append(nll.item())
        counts.append(count.item())
        hits.append(((logits.argmax(dim=-1) == y) & (y != IGNORE)).sum().item())
    n = sum(counts)
    if n == 0:
        raise ValueError("batches hold no position with y != -100 to evaluate")
    return {"loss": sum(sums) / n, "accuracy": sum(hits) / n}
