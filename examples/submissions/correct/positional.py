"""Positions: sinusoidal tables and their shift rotation, rotary embeddings (RoPE), ALiBi."""
import math

import torch


def _check_even(name: str, value: int) -> None:
    if value % 2 != 0:
        raise ValueError(f"{name}={value} must be even")


def _inv_freq(d: int, base: float, device: torch.device | None = None) -> torch.Tensor:
    """The d/2 frequencies w_j = base^(-2j/d), float64."""
    two_j = torch.arange(0, d, 2, dtype=torch.float64, device=device)
    return torch.pow(base, -two_j / d)


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(P1) P[i, 2j] = sin(i w_j), P[i, 2j+1] = cos(i w_j), w_j = base^(-2j/d_model); float32."""
    _check_even("d_model", d_model)
    pos = torch.arange(n_positions, dtype=torch.float64)
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    for j in range(d_model // 2):
        w = math.exp(-(2 * j / d_model) * math.log(base))
        table[:, 2 * j] = torch.sin(pos * w)
        table[:, 2 * j + 1] = torch.cos(pos * w)
    return table.to(torch.float32)


def shift_rotation(delta: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(P2) The block-diagonal M with P[i + delta] = M @ P[i]; float32 (d_model, d_model)."""
    _check_even("d_model", d_model)
    blocks = []
    for angle in (delta * _inv_freq(d_model, base)).tolist():
        c, s = math.cos(angle), math.sin(angle)
        blocks.append(torch.tensor([[c, s], [-s, c]], dtype=torch.float64))
    return torch.block_diag(*blocks).to(torch.float32)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None,
               base: float = 10000.0) -> torch.Tensor:
    """(P3) Rotate each interleaved pair (x[2j], x[2j+1]) at position t by t * w_j.

    A pair is the complex number x[2j] + i x[2j+1]; rotating it is multiplying by e^{ia}.
    """
    T, d = x.shape[-2], x.shape[-1]
    _check_even("x.shape[-1]", d)
    if positions is None:
        positions = torch.arange(T, device=x.device)
    angles = torch.outer(positions.to(device=x.device, dtype=torch.float64),
                         _inv_freq(d, base, device=x.device))
    rotor = torch.polar(torch.ones_like(angles), angles).to(
        torch.complex128 if x.dtype == torch.float64 else torch.complex64)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotor).reshape(x.shape).to(x.dtype)


def _geometric_slopes(n: int) -> list[float]:
    """2^(-8h/n) for h = 1..n: a geometric sequence starting at 2^(-8/n)."""
    start = 2.0 ** (-8.0 / n)
    return [start ** h for h in range(1, n + 1)]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """(P4) ALiBi head slopes (Press et al. 2022), float32 (n_heads,)."""
    if n_heads < 1:
        raise ValueError(f"n_heads={n_heads} must be at least 1")
    p = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads
    slopes = _geometric_slopes(p)
    if p < n_heads:
        slopes += _geometric_slopes(2 * p)[::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(n_heads: int, n_q: int, n_k: int | None = None) -> torch.Tensor:
    """(P5) bias[h, i, j] = -m_h |i - j|, float32 (n_heads, n_q, n_k)."""
    if n_k is None:
        n_k = n_q
    distance = torch.arange(n_q)[:, None] - torch.arange(n_k)[None, :]
    slopes = alibi_slopes(n_heads).view(n_heads, 1, 1)
    return -(slopes * distance.abs())
