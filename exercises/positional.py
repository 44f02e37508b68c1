# Generated from solutions/positional.py by `grader release-stubs` (stub 494262cef103): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
"""Positional information: sinusoidal tables, their shift rotation, RoPE and ALiBi."""
import math

import torch


def frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """The d/2 angular frequencies w_j = base ** (-2j / d), j = 0..d/2-1, in float64.

    A geometric progression from 1 down to about 1/base (shared by P1, P2 and P3).
    """
    raise NotImplementedError("frequencies: your code here (see the docstring)")


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (n_positions, d_model) float32 table of Vaswani et al. (2017), interleaved (P1):

        P[i, 2j]   = sin(i * w_j)
        P[i, 2j+1] = cos(i * w_j),      w_j = base ** (-2j / d_model)

    Frequencies fall geometrically from 1 to about 1/base, so the columns span many "octaves".
    Pitfalls: sin and cos swapped; linear instead of geometric frequencies; the exponent -j/d
    instead of -2j/d. Computing the angles in float64 before casting keeps large positions exact.
    Raises ValueError when d_model is odd.
    """
    raise NotImplementedError("sinusoidal_encoding: your code here (see the docstring)")


def shift_rotation(delta: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (d_model, d_model) float32 matrix M with P[i + delta] = M @ P[i] for every i (P2).

    M is block diagonal; block j, acting on the pair (2j, 2j+1), is the rotation

        [[ cos(delta * w_j), sin(delta * w_j)],
         [-sin(delta * w_j), cos(delta * w_j)]]

    It depends on delta only, not on i: a shift in position is a linear map of the encoding.
    Follows from sin(a + b) and cos(a + b); delta may be negative. Pitfall: the transpose
    (that is the rotation by -delta). Raises ValueError when d_model is odd.
    """
    raise NotImplementedError("shift_rotation: your code here (see the docstring)")


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None,
               base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al.) of x (..., T, d), d even, interleaved pairs (P3).

    Pair j of the vector at position t is rotated by the angle a = positions[t] * w_j,
    w_j = base ** (-2j / d):

        x'[2j]   = x[2j] cos a - x[2j+1] sin a
        x'[2j+1] = x[2j] sin a + x[2j+1] cos a

    positions: (T,), default arange(T). Rotations keep norms, and <rope(q, m), rope(k, n)>
    depends on n - m only: applied to queries and keys, scores see relative positions.
    Pitfalls: the "rotate-half" layout (pairs (j, j + d/2), as in HF/GPT-NeoX) is a different
    function; rotating the values too. Returns a tensor of x's shape, dtype and device.
    Raises ValueError when d is odd.
    """
    raise NotImplementedError("apply_rope: your code here (see the docstring)")


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The (n_heads,) float32 ALiBi slopes of Press et al. (2022) (P4).

    For n a power of two: m_h = 2 ** (-8 h / n), h = 1..n (8 heads: 1/2, 1/4, ..., 1/256).
    Otherwise, with p the largest power of two below n: the p slopes for p, followed by the
    first n - p slopes for 2p taken at even indices 0, 2, 4, ...
    Pitfall: 2 ** (-8 h / n) for every n matches only for powers of two.
    Raises ValueError when n_heads < 1.
    """
    raise NotImplementedError("alibi_slopes: your code here (see the docstring)")


def alibi_bias(n_heads: int, n_q: int, n_k: int | None = None) -> torch.Tensor:
    """The (n_heads, n_q, n_k) float32 ALiBi bias, bias[h, i, j] = -m_h * |i - j| (P5).

    Added to the attention scores before the softmax (not after), it penalises distant keys
    linearly, more steeply in heads with larger slopes. n_k defaults to n_q.
    """
    raise NotImplementedError("alibi_bias: your code here (see the docstring)")
