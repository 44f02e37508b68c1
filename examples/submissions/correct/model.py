"""A tiny decoder-only Transformer language model."""
import torch
from torch import nn

from .attention import causal_mask
from .block import TransformerBlock
from .positional import alibi_bias, sinusoidal_encoding


class TinyTransformerLM(nn.Module):
    """(M1) token ids (B, T) -> next-token logits (B, T, vocab_size), causally masked."""

    POS_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 d_ff: int = 256, max_len: int = 128, dropout: float = 0.0, norm: str = "pre",
                 pos_encoding: str = "sinusoidal", activation: str = "gelu"):
        super().__init__()
        if pos_encoding not in self.POS_ENCODINGS:
            raise ValueError(f"pos_encoding={pos_encoding!r} is not one of {self.POS_ENCODINGS}")
        if norm not in ("pre", "post"):
            raise ValueError(f"norm={norm!r} must be 'pre' or 'post'")
        self.pos_encoding, self.n_heads, self.max_len = pos_encoding, n_heads, max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model) if pos_encoding == "learned" else None
        # A cache, not a parameter: left out of state_dict(). Building it here also rejects an odd
        # d_model at construction (sinusoidal_encoding raises ValueError naming d_model).
        if pos_encoding == "sinusoidal":
            self.register_buffer("sin_table", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([
            TransformerBlock(d_model, n_heads, d_ff, dropout=dropout, norm=norm,
                             rope=(pos_encoding == "rope"), activation=activation)
            for _ in range(n_layers)
        ])
        self.norm_f = nn.LayerNorm(d_model) if norm == "pre" else None
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def _positions(self, T: int, like: torch.Tensor) -> torch.Tensor | None:
        """What is added to the token embeddings at positions 0..T-1 (None: nothing)."""
        if self.pos_encoding == "sinusoidal":
            table = self.sin_table if T <= self.max_len else sinusoidal_encoding(T, like.size(-1))
            return table[:T].to(like)
        if self.pos_encoding == "learned":
            if T > self.max_len:
                raise ValueError(f"sequence length T={T} is longer than max_len={self.max_len}")
            return self.pos_emb(torch.arange(T, device=like.device))
        return None

    def forward(self, idx: torch.Tensor, return_weights: bool = False):
        """idx (B, T) int64 -> logits (B, T, vocab_size), or (logits, [weights per layer])."""
        T = idx.size(1)
        x = self.tok_emb(idx)
        pos = self._positions(T, x)
        if pos is not None:
            x = x + pos
        x = self.drop(x)
        mask = causal_mask(T, device=idx.device)
        bias = None
        if self.pos_encoding == "alibi":
            bias = alibi_bias(self.n_heads, T).to(x)
        all_weights = []
        for block in self.blocks:
            x, w = block(x, mask=mask, bias=bias, return_weights=True)
            all_weights.append(w)
        if self.norm_f is not None:
            x = self.norm_f(x)
        logits = self.lm_head(x)
        return (logits, all_weights) if return_weights else logits
