# Generated from solutions/attention.py by `grader release-stubs` (stub 2c6a2624552f): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
"""Scaled dot-product attention and multi-head attention."""
import math

import torch
from torch import nn

from .positional import apply_rope


def causal_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The (n, n) boolean causal mask: True at [i, j] iff j <= i (query i sees keys 0..i).

    True means ALLOWED, as in torch.nn.functional.scaled_dot_product_attention.
    Pitfalls: hiding the diagonal (j < i); the transpose (j >= i), which lets tokens see the future.
    """
    raise NotImplementedError("causal_mask: your code here (see the docstring)")


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries q (..., n_q, d_k) over keys k (..., n_k, d_k) and values v (..., n_k, d_v).

    (A1)  scores  = q @ k^T / sqrt(d_k) + bias
          weights = softmax(scores over the KEY axis), 0 where mask is False
          out     = weights @ v

    mask: bool, True = allowed, broadcastable to (..., n_q, n_k). bias: float, likewise.
    Leading dimensions broadcast. A query with no allowed key (every key masked, or every
    score -inf through the bias) gets all-zero weights and an all-zero output, never NaN.
    Returns out (..., n_q, d_v) and weights (..., n_q, n_k).
    Pitfalls: dividing by sqrt(d_model) or not at all; softmax over the query axis (dim=-2);
    reading the mask the other way round (nn.MultiheadAttention's True means blocked).
    """
    raise NotImplementedError("scaled_dot_product_attention: your code here (see the docstring)")


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention over x (B, T, d_model).

    Submodules: q_proj, k_proj, v_proj, out_proj (each nn.Linear(d_model, d_model, bias=bias))
    and dropout (nn.Dropout on the attention weights). Head h owns features
    [h * d_head, (h + 1) * d_head) of each projection, d_head = d_model // n_heads: split
    (B, T, d_model) -> (B, n_heads, T, d_head), attend per head, merge back, then out_proj.
    With rope=True, apply_rope (positions 0..T-1, base rope_base) rotates each head's queries
    and keys (never the values) before the scores.
    Raises ValueError when d_model is not divisible by n_heads, or when rope=True and d_head is odd.
    Pitfalls: .view(B, n_heads, T, d_head) straight from (B, T, d_model) mixes tokens and heads
    (view as (B, T, n_heads, d_head), then transpose); merging heads without .contiguous()/.reshape.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 rope: bool = False, rope_base: float = 10000.0):
        super().__init__()
        raise NotImplementedError("MultiHeadAttention.__init__: your code here (see the docstring)")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, return_weights: bool = False):
        """x (B, T, d_model); mask, bias broadcastable to (B, n_heads, T, T).

        Returns y (B, T, d_model), or (y, weights) with weights (B, n_heads, T, T) taken after
        the softmax and before dropout.
        """
        raise NotImplementedError("MultiHeadAttention.forward: your code here (see the docstring)")
