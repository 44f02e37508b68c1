"""positional.py, hidden cases: against the reference, naming classic mistakes.

P1 sinusoidal_matches_reference 2 · P2 shift_rotation_matches_reference 1 · P3 rope_matches_reference 1.5 ·
P4 alibi_slopes_matches_reference 1 · P5 alibi_bias_matches_reference 1.

Tolerances rest on docs/spec.md ("Tolerances"), as in the public cases: float32 tables and
float32 RoPE frequencies are accepted by every value test; every classic mistake differs by orders
of magnitude more. One rule, one test: the contract says to compute in the inputs' dtype, and the
public rope_computes_in_input_dtype alone fails RoPE computed in float32 for float64 inputs.
"""
import torch
from hypothesis import given
from hypothesis import strategies as st

from ...spec import Visibility
from .. import Suite
from ..checks import expect_close, telling
from ..public.positional import (
    BIAS,
    ROPE,
    SHIFT,
    SIN,
    SLOPES,
    TYPICAL_TABLE,
    base_kwargs,
    bases,
    distances,
    even_dims,
    geometric_slopes,
    narrow,
    rope_dims,
    shown,
)
from ..strategies import batch_dims, dtypes, randn, seeds
from .reference import ref

suite = Suite("positional", Visibility.HIDDEN)


@st.composite
def _rope_inputs(draw: st.DrawFn) -> dict:
    """Leading dims, T, even d, positions (None = default, or T drawn ints in [-64, 128]) and base."""
    T = draw(st.integers(1, 6))
    positions = draw(st.none() | st.lists(st.integers(-64, 128), min_size=T, max_size=T))
    return {"lead": draw(batch_dims), "T": T, "d": draw(rope_dims),
            "positions": None if positions is None else torch.tensor(positions), "base": draw(bases)}


# -- what classic mistakes return (computed here, in float64, for the feedback; never shown) --------

def _w(d: int, base: float | None) -> torch.Tensor:
    return (10000.0 if base is None else base) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def _fairseq_w(d: int, base: float | None) -> torch.Tensor:
    """fairseq's frequencies, base ** (-j / (d/2 - 1)) (d > 2)."""
    half = d // 2
    j = torch.arange(half, dtype=torch.float64)
    return (10000.0 if base is None else base) ** (-j / max(1, half - 1))


def _frequency_mistakes(d: int, base: float | None) -> dict[str, torch.Tensor]:
    """Sentence -> the frequencies w_j a submission with that mistake uses."""
    b = 10000.0 if base is None else base
    j = torch.arange(d // 2, dtype=torch.float64)
    mistakes = {
        "the frequencies are spaced linearly (w_j = 1 - 2j/d) instead of geometrically "
        "(w_j = base ** (-2j/d), from 1 down to about 1/base)": 1 - 2 * j / d,
        "the exponent is -j/d instead of -2j/d (j is the pair index: columns 2j and 2j+1 share the "
        "frequency w_j = base ** (-2j/d))": b ** (-j / d),
        "the exponent is -4j/d instead of -2j/d (the column index 2j was doubled again)": b ** (-4 * j / d),
        "the exponent has lost its minus sign (the frequencies base ** (2j/d) grow instead of falling "
        "from 1 to about 1/base)": b ** (2 * j / d),
    }
    if b != 10000.0:
        mistakes["the base argument is ignored (10000 is used instead)"] = _w(d, 10000.0)
    return mistakes


def _table(positions: torch.Tensor, w: torch.Tensor, *, swap: bool = False,
           halves: bool = False) -> torch.Tensor:
    angles = positions.to(torch.float64)[:, None] * w
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    return torch.cat([first, second], 1) if halves else torch.stack([first, second], -1).flatten(1)


def _rotation(delta: int, w: torch.Tensor, *, halves: bool = False) -> torch.Tensor:
    d = 2 * len(w)
    even = torch.arange(d // 2) if halves else torch.arange(0, d, 2)
    odd = even + d // 2 if halves else even + 1
    cos, sin = (delta * w).cos(), (delta * w).sin()
    m = torch.zeros(d, d, dtype=torch.float64)
    m[even, even], m[even, odd], m[odd, even], m[odd, odd] = cos, sin, -sin, cos
    return m


def _rope(x: torch.Tensor, positions: torch.Tensor, w: torch.Tensor, *, halves: bool = False,
          sign: float = 1.0) -> torch.Tensor:
    x, d = x.to(torch.float64), x.shape[-1]
    angles = sign * positions.to(torch.float64)[:, None] * w
    cos, sin = angles.cos(), angles.sin()
    a, b = (x[..., :d // 2], x[..., d // 2:]) if halves else (x[..., 0::2], x[..., 1::2])
    ra, rb = a * cos - b * sin, a * sin + b * cos
    return torch.cat([ra, rb], -1) if halves else torch.stack([ra, rb], -1).flatten(-2)


def _press(n: int, start: int = 1, offset: int = 0) -> torch.Tensor:
    p = 1 << (n.bit_length() - 1)
    return torch.cat([geometric_slopes(p, start), geometric_slopes(2 * p, start)[offset::2][: n - p]])


def _slope_mistakes(n: int, expected: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "2 ** (-8 h / n) is used for every n: that rule holds only when n_heads is a power of two (P4: "
        "otherwise the slopes for the largest power of two p below n, then every other slope for 2p)":
            geometric_slopes(n),
        "the extra slopes for 2p are taken at odd indices (1, 3, 5, ...) instead of even ones (0, 2, 4, ...)":
            _press(n, offset=1),
        "h starts at 0 (m_h = 2 ** (-8 h / n) for h = 1..n: the first slope is 2 ** (-8 / n), not 1)":
            _press(n, start=0),
        "the slopes come in reverse order (P4 lists them from m_1 = 2 ** (-8 / p), the largest, downwards)":
            expected.to(torch.float64).flip(0),
    }


@suite.case(2)
@given(n=st.integers(1, 128), d=even_dims, base=bases)
@telling(narrow, TYPICAL_TABLE)
def sinusoidal_matches_reference(student, n, d, base):
    """sinusoidal_encoding matches (P1) for random n <= 128, d_model and base"""
    call = f"sinusoidal_encoding({n}, {d}{shown(base)})"
    table = student.call(SIN, n, d, **base_kwargs(base))
    expected = ref.positional.sinusoidal_encoding(n, d, **base_kwargs(base))
    i, w = torch.arange(n), _w(d, base)

    def mistakes() -> dict[str, torch.Tensor]:
        return {
            "sin and cos are swapped (the even columns 2j hold sin, the odd columns 2j+1 cos)":
                _table(i, w, swap=True),
            "the table is laid out as [sin | cos] halves (as fairseq and tensor2tensor do) instead of "
            "interleaved columns 2j (sin) and 2j+1 (cos)": _table(i, w, halves=True),
            "the table is fairseq's: [sin | cos] halves instead of interleaved columns 2j (sin) and "
            "2j+1 (cos), and frequencies base ** (-j / (d/2 - 1)) instead of base ** (-2j / d_model)":
                _table(i, _fairseq_w(d, base), halves=True),
            "the positions start at 1 instead of 0 (row i is position i)": _table(i + 1, w),
            **{sentence: _table(i, wrong) for sentence, wrong in _frequency_mistakes(d, base).items()},
        }

    # A natively float32 table is up to ~1e-5 off the float64 one at n <= 128 (docs/spec.md, Tolerances).
    expect_close(table, expected, call, atol=3e-5, rtol=0, diagnoses=mistakes,
                 hint="P[i, 2j] = sin(i * w_j), P[i, 2j+1] = cos(i * w_j) with w_j = base ** (-2j / d_model)")


@suite.case(1)
@given(delta=st.integers(-128, 128), d=even_dims, base=bases)
def shift_rotation_matches_reference(student, delta, d, base):
    """shift_rotation matches (P2) for random delta (negative too), d_model and base"""
    call = f"shift_rotation({delta}, {d}{shown(base)})"
    m = student.call(SHIFT, delta, d, **base_kwargs(base))
    expected = ref.positional.shift_rotation(delta, d, **base_kwargs(base))
    w = _w(d, base)

    def mistakes() -> dict[str, torch.Tensor]:
        return {
            "the matrix is transposed, which is the rotation by -delta (block j must be [[cos, sin], "
            "[-sin, cos]] of the angle delta * w_j)": _rotation(-delta, w),
            "the 2x2 blocks act on the pairs (j, j + d/2) instead of the interleaved pairs (2j, 2j+1)":
                _rotation(delta, w, halves=True),
            **{sentence: _rotation(delta, wrong) for sentence, wrong in _frequency_mistakes(d, base).items()},
        }

    # Angles up to 128 rad computed in float32 are accepted (docs/spec.md, Tolerances).
    expect_close(m, expected, call, atol=5e-5, rtol=0, diagnoses=mistakes,
                 hint="block j, on the pair (2j, 2j+1), is [[cos, sin], [-sin, cos]] of delta * w_j, zeros "
                      "elsewhere")


@suite.case(0.5)
@given(inputs=_rope_inputs(), seed=seeds, dtype=dtypes)
def rope_matches_reference(student, inputs, seed, dtype):
    """apply_rope matches (P3) on random x, positions (default or given, negative too), base and dtype"""
    T, d, positions, base = inputs["T"], inputs["d"], inputs["positions"], inputs["base"]
    x = randn(seed, *inputs["lead"], T, d, dtype=dtype)
    kwargs = {**({} if positions is None else {"positions": positions}), **base_kwargs(base)}
    shown_kwargs = ", ".join(["x"] + [f"{key}={value.tolist() if key == 'positions' else value}"
                                      for key, value in kwargs.items()])
    out = student.call(ROPE, x, **kwargs)
    expected = ref.positional.apply_rope(x, positions, **base_kwargs(base))
    at = torch.arange(T) if positions is None else positions
    w = _w(d, base)

    def mistakes() -> dict[str, torch.Tensor]:
        found = {
            "the pairs are (j, j + d/2) (the rotate-half layout of HF and GPT-NeoX) instead of the "
            "interleaved pairs (2j, 2j+1)": _rope(x, at, w, halves=True),
            "the rotation goes the wrong way: angle -a instead of a (the sin terms have the wrong sign)":
                _rope(x, at, w, sign=-1.0),
            **{sentence: _rope(x, at, wrong) for sentence, wrong in _frequency_mistakes(d, base).items()},
        }
        if positions is not None:
            found["the positions argument is ignored (arange(T) is used instead)"] = _rope(x, torch.arange(T),
                                                                                          w)
        return found

    # Not TOLERANCES[dtype]: RoPE computed with float32 frequencies (~1e-5 off at positions up to 128)
    # is accepted here for float64 inputs too; the public rope_computes_in_input_dtype fails it.
    tol = 1e-4 if dtype == torch.float32 else 5e-5
    expect_close(out, expected, f"apply_rope({shown_kwargs}) with x of shape {tuple(x.shape)}, {dtype}",
                 atol=tol, rtol=tol, diagnoses=mistakes,
                 hint="x'[2j] = x[2j] cos a - x[2j+1] sin a, x'[2j+1] = x[2j] sin a + x[2j+1] cos a, "
                      "a = positions[t] * base ** (-2j / d)")


@suite.case(1)
def alibi_slopes_matches_reference(student):
    """alibi_slopes(n) matches (P4) for n = 1..16, powers of two or not (6 and 12 heads among them)"""
    for n in range(1, 17):
        expected = ref.positional.alibi_slopes(n)
        # float32 slopes: relative rounding only (the smallest slope is 2^-8)
        expect_close(student.call(SLOPES, n), expected, f"alibi_slopes({n})", atol=1e-7, rtol=1e-5,
                     diagnoses=_slope_mistakes(n, expected),
                     hint="P4: for a power of two m_h = 2 ** (-8 h / n), h = 1..n; otherwise the slopes for "
                          "the largest power of two p below n, then the first n - p slopes for 2p at even "
                          "indices")


@suite.case(1)
@given(n_heads=st.integers(1, 12), n_q=st.integers(1, 8), n_k=st.none() | st.integers(1, 8))
def alibi_bias_matches_reference(student, n_heads, n_q, n_k):
    """alibi_bias matches (P5) for random n_heads (powers of two or not), n_q and n_k (default or not)"""
    args = (n_heads, n_q) if n_k is None else (n_heads, n_q, n_k)
    bias = student.call(BIAS, *args)
    expected = ref.positional.alibi_bias(*args)
    slopes = ref.positional.alibi_slopes(n_heads).to(torch.float64)[:, None, None]
    distance = distances(n_q, n_q if n_k is None else n_k)
    mistakes = {
        "the sign is flipped: the bias is -m_h |i - j| (never positive), penalising distant keys":
            slopes * distance.abs(),
        "the distance has no absolute value (-m_h (i - j) instead of -m_h |i - j|)": -slopes * distance,
        "the distance has no absolute value (-m_h (j - i) instead of -m_h |i - j|)": slopes * distance,
        **{f"the slopes are wrong (fix alibi_slopes first): {sentence}":
           -wrong[:, None, None] * distance.abs()
           for sentence, wrong in _slope_mistakes(n_heads, slopes.flatten()).items()},
    }
    expect_close(bias, expected, f"alibi_bias({', '.join(map(str, args))})", atol=1e-6, rtol=1e-5,
                 diagnoses=mistakes,
                 hint="bias[h, i, j] = -m_h |i - j| with m = alibi_slopes(n_heads) (check alibi_slopes first "
                      "if it fails)")
