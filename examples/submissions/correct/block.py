"""A Transformer block: self-attention and feed-forward sublayers, each with a residual."""
import torch
from torch import nn

from .attention import MultiHeadAttention
from .feedforward import FeedForward


class TransformerBlock(nn.Module):
    """Pre-norm (B1) or post-norm (B2) Transformer block."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm: str = "pre", rope: bool = False, activation: str = "gelu"):
        super().__init__()
        if norm not in {"pre", "post"}:
            raise ValueError(f"norm={norm!r} must be 'pre' or 'post'")
        self.pre_norm = norm == "pre"
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, rope=rope)
        self.ffn = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def _attend(self, x, mask, bias):
        y, w = self.attn(x, mask=mask, bias=bias, return_weights=True)
        return self.dropout(y), w

    def _pre(self, x, mask, bias):
        """(B1) h = x + attn(norm1(x)); y = h + ffn(norm2(h))."""
        a, w = self._attend(self.norm1(x), mask, bias)
        h = x + a
        return h + self.dropout(self.ffn(self.norm2(h))), w

    def _post(self, x, mask, bias):
        """(B2) h = norm1(x + attn(x)); y = norm2(h + ffn(h))."""
        a, w = self._attend(x, mask, bias)
        h = self.norm1(x + a)
        return self.norm2(h + self.dropout(self.ffn(h))), w

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, return_weights: bool = False):
        """x (B, T, d_model) -> y, or (y, attention weights (B, n_heads, T, T))."""
        sublayers = self._pre if self.pre_norm else self._post
        y, w = sublayers(x, mask, bias)
        return (y, w) if return_weights else y
