# Generated from solutions/model.py by `grader release-stubs` (stub 41eebd417486): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
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
        raise NotImplementedError("TinyTransformerLM.__init__: your code here (see the docstring)")

    def forward(self, idx: torch.Tensor, return_weights: bool = False):
        """idx (B, T) int64 -> logits (B, T, vocab_size), or (logits, [weights per layer])."""
        raise NotImplementedError("TinyTransformerLM.forward: your code here (see the docstring)")
