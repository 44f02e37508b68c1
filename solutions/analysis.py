"""Reading attention patterns: entropy, previous-token and induction scores, attention maps."""
import torch
from torch import nn


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """(X1) Mean over queries of the entropy -sum_k p log p of each weight row, natural log.

    weights (..., n_q, n_k) -> (...). 0 log 0 counts as 0 (torch.special.xlogy does that), so
    masked keys add nothing. Uniform attention over n keys gives log(n); one-hot gives 0.
    Pitfall: log2 (bits) instead of the natural log (nats).
    """
    # BEGIN SOLUTION
    return -torch.special.xlogy(weights, weights).sum(dim=-1).mean(dim=-1)
    # END SOLUTION


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """(X2) Mean over queries i >= 1 of weights[..., i, i - 1]: how much a head looks one back.

    weights (..., n_q, n_k) -> (...). Raises ValueError when n_q < 2.
    """
    # BEGIN SOLUTION
    if weights.size(-2) < 2:
        raise ValueError(f"previous_token_score needs at least 2 queries, got {weights.size(-2)}")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)
    # END SOLUTION


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """(X3) On a sequence repeating with this period: mean over queries i >= period of
    weights[..., i, i - period + 1].

    An induction head at token i attends to the token that FOLLOWED the previous occurrence of
    token i, which sits at i - period + 1. weights (..., n_q, n_k) -> (...).
    Raises ValueError unless 1 <= period < n_q.
    """
    # BEGIN SOLUTION
    if not 1 <= period < weights.size(-2):
        raise ValueError(f"period={period} must be in [1, n_q) with n_q={weights.size(-2)}")
    stripe = weights.diagonal(offset=1 - period, dim1=-2, dim2=-1)
    return stripe[..., 1:].mean(dim=-1)
    # END SOLUTION


def attention_maps(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """Attention weights of every layer: (n_layers, B, n_heads, T, T).

    Runs model(idx, return_weights=True) in eval mode without gradients (dropout off), then
    puts the model back in the mode it was in.
    """
    # BEGIN SOLUTION
    was_training = model.training
    model.eval()
    with torch.no_grad():
        _, weights = model(idx, return_weights=True)
    model.train(was_training)
    return torch.stack(weights)
    # END SOLUTION
