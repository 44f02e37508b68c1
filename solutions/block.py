"""One Transformer block: attention and feed-forward sublayers with residuals and LayerNorm."""
import torch
from torch import nn

from .attention import MultiHeadAttention
from .feedforward import FeedForward


class TransformerBlock(nn.Module):
    """A pre-norm or post-norm Transformer block.

    Submodules: attn (MultiHeadAttention with this dropout and rope), ffn (FeedForward),
    norm1, norm2 (nn.LayerNorm(d_model)) and dropout (on each sublayer's output).

    (B1) norm="pre":  h = x + dropout(attn(norm1(x)));  y = h + dropout(ffn(norm2(h)))
    (B2) norm="post": h = norm1(x + dropout(attn(x)));  y = norm2(h + dropout(ffn(h)))

    Pre-norm keeps an identity path from input to output (well-behaved gradients at init);
    post-norm (the original Transformer) normalises after each residual sum and usually
    needs learning-rate warmup. Raises ValueError for a norm other than "pre" or "post".
    Pitfalls: normalising the residual stream itself in pre-norm (x = norm1(x) before adding);
    using norm1 for both sublayers.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm: str = "pre", rope: bool = False, activation: str = "gelu"):
        super().__init__()
        # BEGIN SOLUTION
        if norm not in ("pre", "post"):
            raise ValueError(f"norm={norm!r} must be 'pre' or 'post'")
        self.norm = norm
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, rope=rope)
        self.ffn = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        # END SOLUTION

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, return_weights: bool = False):
        """x (B, T, d_model) -> y (B, T, d_model), or (y, weights) with attn's weights."""
        # BEGIN SOLUTION
        if self.norm == "pre":
            a, weights = self.attn(self.norm1(x), mask, bias, return_weights=True)
            h = x + self.dropout(a)
            y = h + self.dropout(self.ffn(self.norm2(h)))
        else:
            a, weights = self.attn(x, mask, bias, return_weights=True)
            h = self.norm1(x + self.dropout(a))
            y = self.norm2(h + self.dropout(self.ffn(h)))
        return (y, weights) if return_weights else y
        # END SOLUTION
