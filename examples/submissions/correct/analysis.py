"""Attention-pattern statistics: entropy, previous-token and induction scores, attention maps."""
import torch
from torch import nn


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """(X1) Mean over queries of -sum_k p ln p (0 ln 0 = 0). (..., n_q, n_k) -> (...)."""
    p = weights
    tiny = torch.finfo(p.dtype).tiny
    plogp = torch.where(p > 0, p * torch.log(p.clamp(min=tiny)), 0.0)
    return -plogp.sum(dim=-1).mean(dim=-1)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """(X2) Mean over queries i >= 1 of weights[..., i, i-1]. (..., n_q, n_k) -> (...)."""
    n_q = weights.shape[-2]
    if n_q < 2:
        raise ValueError(f"weights needs n_q >= 2 queries, got n_q={n_q}")
    i = torch.arange(1, n_q, device=weights.device)
    return weights[..., i, i - 1].mean(dim=-1)


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """(X3) Mean over queries i >= period of weights[..., i, i - period + 1]."""
    n_q = weights.shape[-2]
    if period < 1 or period >= n_q:
        raise ValueError(f"period={period} must satisfy 1 <= period < n_q={n_q}")
    i = torch.arange(period, n_q, device=weights.device)
    return weights[..., i, i - period + 1].mean(dim=-1)


def attention_maps(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """All layers' attention weights, (n_layers, B, n_heads, T, T), in eval mode without grad."""
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, per_layer = model(idx, return_weights=True)
    finally:
        model.train(mode)
    return torch.stack(per_layer, dim=0)
