"""Attention: a causal mask, scaled dot-product attention, and multi-head self-attention."""
import torch
import torch.nn.functional as F
from torch import nn

from .positional import apply_rope


def causal_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(n, n) bool, True at [i, j] iff key j is not in the future of query i (j <= i)."""
    rows = torch.arange(n, device=device)[:, None]
    cols = torch.arange(n, device=device)[None, :]
    return cols <= rows


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the key axis (last) that gives weight 0 where mask is False or the score is -inf.

    Disallowed scores are set to the most negative finite number rather than -inf, so a row
    with nothing allowed stays finite (uniform) through the softmax; it is then zeroed.
    """
    allowed = scores > float("-inf")
    if mask is not None:
        allowed = allowed & mask
    scores = torch.where(allowed, scores, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return torch.where(allowed, weights, 0.0)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A1) softmax(q k^T / sqrt(d_k) + bias, masked) v. Returns (out, weights)."""
    d_k = q.shape[-1]
    scores = torch.einsum("...qd,...kd->...qk", q, k) * d_k ** -0.5
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, mask)
    out = torch.einsum("...qk,...kd->...qd", weights, v)
    return out, weights


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention; head h owns features [h*d_head, (h+1)*d_head) of q, k, v."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 rope: bool = False, rope_base: float = 10000.0):
        super().__init__()
        if n_heads <= 0:
            raise ValueError(f"n_heads={n_heads} must be positive")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads
        if rope and self.d_head % 2 == 1:
            raise ValueError(
                f"rope=True needs an even head size, but d_model={d_model} / n_heads={n_heads} "
                f"= {self.d_head}")
        self.rope, self.rope_base = rope, rope_base
        self.scale = 1.0 / self.d_head ** 0.5
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, n_heads, T, d_head)."""
        return t.unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, return_weights: bool = False):
        """x (B, T, d_model) -> y (B, T, d_model), or (y, weights (B, n_heads, T, T))."""
        # one fused matmul for the three projections
        projs = (self.q_proj, self.k_proj, self.v_proj)
        w_qkv = torch.cat([p.weight for p in projs], dim=0)
        b_qkv = None if self.q_proj.bias is None else torch.cat([p.bias for p in projs])
        q, k, v = F.linear(x, w_qkv, b_qkv).split(self.d_model, dim=-1)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if self.rope:
            q = apply_rope(q, base=self.rope_base)
            k = apply_rope(k, base=self.rope_base)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.scale
        if bias is not None:
            scores = scores + bias
        weights = masked_softmax(scores, mask)
        heads = torch.einsum("bhqk,bhkd->bhqd", self.dropout(weights), v)
        y = self.out_proj(heads.transpose(1, 2).flatten(2))
        if return_weights:
            return y, weights
        return y
