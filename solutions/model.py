"""A tiny decoder-only Transformer language model."""
import torch
from torch import nn

from .attention import causal_mask
from .block import TransformerBlock
from .positional import alibi_bias, sinusoidal_encoding

POS_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")


class TinyTransformerLM(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size), causally masked.

    Submodules: tok_emb (nn.Embedding(vocab_size, d_model)); pos_emb (nn.Embedding(max_len,
    d_model)) for pos_encoding="learned" only, else None; drop (embedding dropout); blocks
    (nn.ModuleList of n_layers TransformerBlock); norm_f (nn.LayerNorm(d_model)) for norm="pre"
    only, else None; lm_head (nn.Linear(d_model, vocab_size, bias=False)). No other parameters,
    and any buffer is registered with persistent=False, so state dicts are interchangeable.

    (M1) x = drop(tok_emb(idx) + pos), pos being
         "sinusoidal": rows 0..T-1 of sinusoidal_encoding (P1)
         "learned":    pos_emb(arange(T))
         "rope", "alibi", "none": nothing (rope rotates q and k inside attention; alibi adds
                       alibi_bias (P5) to the scores)
    then every block with the causal mask (and the ALiBi bias), norm_f (pre-norm only), lm_head.
    T > max_len raises ValueError for "learned"; the other encodings accept any T.
    Raises ValueError for an unknown pos_encoding or norm, and for an odd d_model with "sinusoidal".
    Pitfall: a post-norm model has no final norm (each block already ends in one).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 d_ff: int = 256, max_len: int = 128, dropout: float = 0.0, norm: str = "pre",
                 pos_encoding: str = "sinusoidal", activation: str = "gelu"):
        super().__init__()
        # BEGIN SOLUTION
        if pos_encoding not in POS_ENCODINGS:
            raise ValueError(f"pos_encoding={pos_encoding!r} must be one of {POS_ENCODINGS}")
        if norm not in ("pre", "post"):
            raise ValueError(f"norm={norm!r} must be 'pre' or 'post'")
        if pos_encoding == "sinusoidal" and d_model % 2:
            raise ValueError(f"d_model={d_model} must be even for pos_encoding='sinusoidal'")
        self.pos_encoding = pos_encoding
        self.n_heads = n_heads
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model) if pos_encoding == "learned" else None
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, dropout=dropout, norm=norm,
                             rope=pos_encoding == "rope", activation=activation)
            for _ in range(n_layers)
        )
        self.norm_f = nn.LayerNorm(d_model) if norm == "pre" else None
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        # END SOLUTION

    def forward(self, idx: torch.Tensor, return_weights: bool = False):
        """idx (B, T) int64 -> logits (B, T, vocab_size), or (logits, [weights per layer])."""
        # BEGIN SOLUTION
        B, T = idx.shape
        x = self.tok_emb(idx)
        if self.pos_encoding == "sinusoidal":
            x = x + sinusoidal_encoding(T, x.size(-1)).to(x)
        elif self.pos_encoding == "learned":
            if T > self.max_len:
                raise ValueError(f"sequence length T={T} exceeds max_len={self.max_len}")
            x = x + self.pos_emb(torch.arange(T, device=idx.device))
        x = self.drop(x)
        mask = causal_mask(T, device=idx.device)
        bias = alibi_bias(self.n_heads, T).to(x) if self.pos_encoding == "alibi" else None
        weights = []
        for block in self.blocks:
            x, w = block(x, mask, bias, return_weights=True)
            weights.append(w)
        if self.norm_f is not None:
            x = self.norm_f(x)
        logits = self.lm_head(x)
        return (logits, weights) if return_weights else logits
        # END SOLUTION
