"""Small hypothesis strategies the suites compose, and seeded tensors built from their draws.

Tensors are drawn as a seed (so hypothesis shrinks shapes and flags, not thousands of floats)
and made by `randn` with a torch.Generator: the same draw gives the same tensor in every run.
"""
import hashlib

import torch
from hypothesis import strategies as st

dtypes = st.sampled_from([torch.float32, torch.float64])
SEED_HEADROOM = 2**16
"""Cases derive more seeds from a drawn one (seed + 1, seed + 10 + i): they stay below 2**64."""
_key = [0]


def key_seeds(key: int) -> None:
    """Make the seeds drawn from now on depend on `key`: the case's examples seed, salted for a hidden
    case (Case.seed_examples sets it before each case)."""
    _key[0] = key


def _spread(value: int) -> int:
    digest = hashlib.sha256(f"{_key[0]}/{value}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**64 - SEED_HEADROOM)


seeds = st.integers(0, 2**64 - 1 - SEED_HEADROOM).map(_spread)
"""Tensor seeds: 64 bits, each drawn value hashed with the case's key. Hypothesis favours simple
values (0, 1, powers of two); hashed, they give seeds nobody without the salt can list, one value
of a hidden input that leaks does not give away the rest of it, and two salts draw different seeds."""

small = st.integers(1, 5)
batch_dims = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


def randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def random_mask(seed: int, *shape: int, keep_one: bool = True) -> torch.Tensor:
    """A random boolean mask; with keep_one, every query row allows at least one key."""
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6
    if keep_one:
        mask[..., 0] = True
    return mask


def causal(n: int) -> torch.Tensor:
    """The causal mask (n, n), True where j <= i, built here (tests never rely on the student's)."""
    return torch.ones(n, n, dtype=torch.bool).tril()


@st.composite
def attention_shapes(draw: st.DrawFn) -> dict:
    """Leading dims, n_q, n_k, d_k, d_v for scaled_dot_product_attention."""
    return {"lead": draw(batch_dims), "n_q": draw(small), "n_k": draw(small),
            "d_k": draw(st.integers(1, 8)), "d_v": draw(st.integers(1, 6))}


@st.composite
def mha_configs(draw: st.DrawFn, rope: bool | None = None) -> dict:
    """A MultiHeadAttention config (d_head even when rope) with a batch size and length."""
    n_heads = draw(st.integers(1, 4))
    use_rope = draw(st.booleans()) if rope is None else rope
    d_head = draw(st.sampled_from([2, 4, 6] if use_rope else [1, 2, 3, 4]))
    return {"d_model": n_heads * d_head, "n_heads": n_heads, "rope": use_rope,
            "B": draw(st.integers(1, 3)), "T": draw(st.integers(1, 6))}
