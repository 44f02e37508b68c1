# Generated from solutions/block.py by `grader release-stubs` (stub f39a0f50bf7e): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
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
        raise NotImplementedError("TransformerBlock.__init__: your code here (see the docstring)")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, return_weights: bool = False):
        """x (B, T, d_model) -> y (B, T, d_model), or (y, weights) with attn's weights."""
        raise NotImplementedError("TransformerBlock.forward: your code here (see the docstring)")
