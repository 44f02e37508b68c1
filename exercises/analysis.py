# Generated from solutions/analysis.py by `grader release-stubs` (stub 82186865cbde): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
"""Reading attention patterns: entropy, previous-token and induction scores, attention maps."""
import torch
from torch import nn


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """(X1) Mean over queries of the entropy -sum_k p log p of each weight row, natural log.

    weights (..., n_q, n_k) -> (...). 0 log 0 counts as 0 (torch.special.xlogy does that), so
    masked keys add nothing. Uniform attention over n keys gives log(n); one-hot gives 0.
    Pitfall: log2 (bits) instead of the natural log (nats).
    """
    raise NotImplementedError("attention_entropy: your code here (see the docstring)")


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """(X2) Mean over queries i >= 1 of weights[..., i, i - 1]: how much a head looks one back.

    weights (..., n_q, n_k) -> (...). Raises ValueError when n_q < 2.
    """
    raise NotImplementedError("previous_token_score: your code here (see the docstring)")


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """(X3) On a sequence repeating with this period: mean over queries i >= period of
    weights[..., i, i - period + 1].

    An induction head at token i attends to the token that FOLLOWED the previous occurrence of
    token i, which sits at i - period + 1. weights (..., n_q, n_k) -> (...).
    Raises ValueError unless 1 <= period < n_q.
    """
    raise NotImplementedError("induction_score: your code here (see the docstring)")


def attention_maps(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """Attention weights of every layer: (n_layers, B, n_heads, T, T).

    Runs model(idx, return_weights=True) in eval mode without gradients (dropout off), then
    puts the model back in the mode it was in.
    """
    raise NotImplementedError("attention_maps: your code here (see the docstring)")
