"""positional.py: sinusoidal table (P1), shift rotation (P2), RoPE (P3), ALiBi slopes (P4) and bias (P5) (15 points).

Weights: public (properties of the student's own outputs, no reference) 8 points:
  P1 sinusoidal_table_properties 1 · P2 shift_rotation_moves_rows 1, shift_rotation_is_a_rotation 1 ·
  P3 rope_keeps_shape_dtype_and_lengths 1, rope_scores_depend_on_offset 1 · P4 alibi_slopes_properties 1 ·
  P5 alibi_bias_properties 1 · P1-P3 odd_dimensions_raise 1;
hidden (against the reference) 7 points:
  P1 sinusoidal_matches_reference 2 · P2 shift_rotation_matches_reference 1 · P3 rope_matches_reference 2 ·
  P4 alibi_slopes_matches_reference 1 · P5 alibi_bias_matches_reference 1.

Tolerances rest on NOTES.md: a float32 table computed natively differs from the float64 one by up to
~1e-5 for n <= 128 (so positions stay <= 128), and RoPE computed with float32 frequencies is off by
~1e-5 even for float64 inputs; every classic mistake differs by orders of magnitude more.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ..reference import ref
from . import Suite
from .checks import Failed, expect, expect_close, expect_tensor, expect_value_error
from .strategies import batch_dims, dtypes, randn, seeds

suite = Suite("positional")
SIN, SHIFT, ROPE = "positional.sinusoidal_encoding", "positional.shift_rotation", "positional.apply_rope"
SLOPES, BIAS = "positional.alibi_slopes", "positional.alibi_bias"

# Private strategies (candidates for strategies.py).
even_dims = st.integers(1, 32).map(lambda half: 2 * half)
bases = st.sampled_from([None, 10000.0, 100.0, 500.0])  # None: the default base, not passed


@st.composite
def _row_shifts(draw: st.DrawFn) -> tuple[int, int]:
    """A table length n <= 128 and a shift delta with |delta| < n (negative too)."""
    n = draw(st.integers(2, 128))
    return n, draw(st.integers(-(n - 1), n - 1))


@st.composite
def _rope_inputs(draw: st.DrawFn) -> dict:
    """Leading dims, T, even d, positions (None = default, or T drawn ints in [-64, 128]) and base."""
    T = draw(st.integers(1, 6))
    positions = draw(st.none() | st.lists(st.integers(-64, 128), min_size=T, max_size=T))
    return {"lead": draw(batch_dims), "T": T, "d": draw(st.integers(1, 8).map(lambda h: 2 * h)),
            "positions": None if positions is None else torch.tensor(positions), "base": draw(bases)}


def _kw(base: float | None) -> dict:
    return {} if base is None else {"base": base}


def _shown(base: float | None) -> str:
    return "" if base is None else f", base={base:g}"


# -- what classic mistakes return (computed here, in float64, for the feedback; never shown) --------

def _w(d: int, base: float | None) -> torch.Tensor:
    return (10000.0 if base is None else base) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


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


def _table(positions: torch.Tensor, w: torch.Tensor, *, swap: bool = False, halves: bool = False) -> torch.Tensor:
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


def _geometric(n: int, start: int = 1) -> torch.Tensor:
    return 2.0 ** (-8.0 * torch.arange(start, start + n, dtype=torch.float64) / n)


def _press(n: int, start: int = 1, offset: int = 0) -> torch.Tensor:
    p = 1 << (n.bit_length() - 1)
    return torch.cat([_geometric(p, start), _geometric(2 * p, start)[offset::2][: n - p]])


def _slope_mistakes(n: int, expected: torch.Tensor) -> dict[str, torch.Tensor]:
    mistakes = {
        "2 ** (-8 h / n) is used for every n: that rule holds only when n_heads is a power of two (P4: "
        "otherwise the slopes for the largest power of two p below n, then every other slope for 2p)":
            _geometric(n),
        "the extra slopes for 2p are taken at odd indices (1, 3, 5, ...) instead of even ones (0, 2, 4, ...)":
            _press(n, offset=1),
        "h starts at 0 (m_h = 2 ** (-8 h / n) for h = 1..n: the first slope is 2 ** (-8 / n), not 1)": _press(n, start=0),
        "the slopes come in reverse order (P4 lists them from m_1 = 2 ** (-8 / p), the largest, downwards)":
            expected.to(torch.float64).flip(0),
    }
    return mistakes


def _distance(n_q: int, n_k: int) -> torch.Tensor:
    return (torch.arange(n_q)[:, None] - torch.arange(n_k)[None, :]).to(torch.float64)


# -- public: properties of the student's own outputs ------------------------------------------------

@suite.case(1, public=True)
@settings(max_examples=8)
@given(n=st.integers(1, 128), d=even_dims, base=bases)
def sinusoidal_table_properties(student, n, d, base):
    """sinusoidal_encoding is a float32 (n, d_model) table: row 0 is [0, 1, 0, 1, ...], each pair (2j, 2j+1) on the unit circle"""
    call = f"sinusoidal_encoding({n}, {d}{_shown(base)})"
    table = expect_tensor(student.call(SIN, n, d, **_kw(base)), (n, d), call)
    expect(table.dtype == torch.float32, f"{call} has dtype {table.dtype}, expected torch.float32 (SPEC P1)")
    expect(bool(torch.isfinite(table).all()), f"{call} contains NaN or inf")
    expect(table.abs().max().item() <= 1 + 1e-6,
           f"{call} has entries of size {table.abs().max().item():.3g}: every entry is a sin or a cos, within [-1, 1]")
    row0 = torch.tensor([0.0, 1.0] * (d // 2), dtype=torch.float64)
    expect_close(table[0], row0, f"row 0 of {call}", atol=1e-6,
                 hint="position 0 has angle 0 in every pair: sin 0 = 0 in the even columns 2j, cos 0 = 1 in the odd columns 2j+1",
                 diagnoses={"sin and cos are swapped (the even columns 2j hold sin, the odd columns 2j+1 cos)": row0.roll(1),
                            "the table is laid out as [sin | cos] halves instead of interleaved columns 2j (sin) and 2j+1 (cos)":
                                torch.tensor([0.0] * (d // 2) + [1.0] * (d // 2), dtype=torch.float64)})
    radius = table.to(torch.float64).unflatten(1, (d // 2, 2)).square().sum(-1)
    expect_close(radius, torch.ones(n, d // 2, dtype=torch.float64), f"P[i, 2j]^2 + P[i, 2j+1]^2 in {call}", atol=2e-5,
                 hint="the columns 2j and 2j+1 hold sin and cos of the same angle i * w_j")


@suite.case(1, public=True)
@settings(max_examples=8)
@given(shift=_row_shifts(), d=even_dims, base=bases)
def shift_rotation_moves_rows(student, shift, d, base):
    """shift_rotation(delta) maps every row of your table to the row delta later: P[i + delta] = M @ P[i], delta negative too"""
    n, delta = shift
    table = expect_tensor(student.call(SIN, n, d, **_kw(base)), (n, d), f"sinusoidal_encoding({n}, {d}{_shown(base)})")
    call = f"shift_rotation({delta}, {d}{_shown(base)})"
    m = expect_tensor(student.call(SHIFT, delta, d, **_kw(base)), (d, d), call).to(torch.float64)
    rows = torch.arange(max(0, -delta), min(n, n - delta))
    p, target = table.to(torch.float64)[rows], table.to(torch.float64)[rows + delta]
    if not torch.allclose(p @ m.T, target, atol=1e-4, rtol=0) and torch.allclose(p @ m, target, atol=1e-3, rtol=0):
        raise Failed(f"{call} @ P[i] gives P[i - delta] instead of P[i + delta]: your M moves rows the wrong way. "
                     "Either M is transposed (that is the rotation by -delta: block j must be [[cos, sin], [-sin, cos]] "
                     "of delta * w_j), or your table has sin and cos swapped (P1: sin in the even columns)")
    expect_close(p @ m.T, target, f"{call} @ P[i] for i = {rows[0].item()}.. (row r is i = {rows[0].item()} + r)",
                 atol=1e-4, rtol=0,
                 hint=f"it should equal P[i + {delta}] of your sinusoidal_encoding table: block j of M rotates the pair "
                      "(2j, 2j+1) by delta * w_j, with the frequencies w_j of the table")


@suite.case(1, public=True)
@settings(max_examples=8)
@given(d=even_dims, a=st.integers(-64, 64), b=st.integers(-64, 64), base=bases)
def shift_rotation_is_a_rotation(student, d, a, b, base):
    """shift_rotation(0) = I; M is orthogonal and block diagonal on the pairs (2j, 2j+1); M(a) @ M(b) = M(a + b)"""
    def rotation(delta: int) -> torch.Tensor:
        call = f"shift_rotation({delta}, {d}{_shown(base)})"
        m = expect_tensor(student.call(SHIFT, delta, d, **_kw(base)), (d, d), call)
        expect(m.is_floating_point() and bool(torch.isfinite(m).all()),
               f"{call} should be a finite float tensor, got {m.dtype}")
        return m.to(torch.float64)

    eye = torch.eye(d, dtype=torch.float64)
    expect_close(rotation(0), eye, f"shift_rotation(0, {d}{_shown(base)})", atol=1e-6,
                 hint="a shift by 0 leaves every row alone: M is the identity")
    ma, mb, mab = rotation(a), rotation(b), rotation(a + b)
    pair = torch.arange(d) // 2
    outside = ma.masked_fill(pair[:, None] == pair[None, :], 0.0).abs()
    expect(outside.max().item() <= 1e-6,
           f"shift_rotation({a}, {d}) has {outside.max().item():.3g} at {tuple(divmod(outside.argmax().item(), d))}: "
           "M is block diagonal, each 2x2 block acting on one interleaved pair (2j, 2j+1)")
    expect_close(ma @ ma.T, eye, f"M @ M^T for M = shift_rotation({a}, {d})", atol=1e-5,
                 hint="M is a rotation, so it is orthogonal: each block is [[cos, sin], [-sin, cos]] of one angle")
    expect_close(ma @ mb, mab, f"shift_rotation({a}) @ shift_rotation({b}) (d_model={d})", atol=1e-4, rtol=0,
                 hint=f"shifting by {a} and then by {b} is shifting by {a + b}: block j's angle is delta * w_j")


@suite.case(1, public=True)
@given(lead=batch_dims, T=st.integers(1, 6), d=st.integers(1, 8).map(lambda h: 2 * h), seed=seeds, dtype=dtypes)
def rope_keeps_shape_dtype_and_lengths(student, lead, T, d, seed, dtype):
    """apply_rope keeps x's shape, dtype, position 0 and each pair (x[2j], x[2j+1])'s length; positions defaults to arange(T)"""
    x = randn(seed, *lead, T, d, dtype=dtype)
    call = f"apply_rope(x) with x of shape {tuple(x.shape)}"
    out = expect_tensor(student.call(ROPE, x), x.shape, call)
    expect(out.dtype == dtype, f"x is {dtype} but {call} is {out.dtype}: compute in the input's dtype")
    expect(bool(torch.isfinite(out).all()), f"{call} contains NaN or inf")
    tol = {"atol": 1e-5, "rtol": 1e-5}
    x64, out64 = x.to(torch.float64), out.to(torch.float64)
    expect_close(out64.norm(dim=-1), x64.norm(dim=-1), f"the norm of each vector of {call}", **tol,
                 hint="RoPE rotates, so it keeps the norm of every vector")
    expect_close(out64.unflatten(-1, (d // 2, 2)).norm(dim=-1), x64.unflatten(-1, (d // 2, 2)).norm(dim=-1),
                 f"the length of each pair (x[2j], x[2j+1]) of {call}", **tol,
                 hint="P3 rotates the interleaved pairs (2j, 2j+1), so each keeps its length; pairs (j, j + d/2) are "
                      "the rotate-half layout, a different function")
    expect_close(out64[..., 0, :], x64[..., 0, :], f"position 0 of {call}", **tol,
                 hint="position 0 has angle 0: RoPE leaves it unchanged")
    explicit = student.call(ROPE, x, positions=torch.arange(T))
    expect_close(explicit, out64, f"apply_rope(x, positions=torch.arange({T}))", **tol,
                 hint="positions defaults to arange(T): both calls must agree")


@suite.case(1, public=True)
@given(d=st.integers(1, 8).map(lambda h: 2 * h), m=st.integers(-40, 40), n=st.integers(-40, 40),
       s=st.integers(-40, 40), seed=seeds)
def rope_scores_depend_on_offset(student, d, m, n, s, seed):
    """<rope(q, m), rope(k, n)> depends only on n - m (positions given as a tensor), and equals <q, k> when m = n"""
    q, k = randn(seed, d), randn(seed + 1, d)
    x = torch.stack([q, k])
    scale = 1e-5 * (1 + q.norm().item() * k.norm().item())

    def score(i: int, j: int) -> float:
        out = expect_tensor(student.call(ROPE, x, positions=torch.tensor([i, j])), (2, d),
                            f"apply_rope(x, positions=torch.tensor([{i}, {j}])) with x of shape (2, {d})")
        return float(out[0].to(torch.float64) @ out[1].to(torch.float64))

    same, plain = score(m, m), float(q @ k)
    expect(abs(same - plain) <= scale,
           f"q and k both at position {m}: <rope(q), rope(k)> = {same:.6g}, expected <q, k> = {plain:.6g}: equal positions "
           "get the same rotation, which keeps dot products (is the positions argument used?)")
    base_score, shifted, relative = score(m, n), score(m + s, n + s), score(0, n - m)
    expect(abs(base_score - shifted) <= scale and abs(base_score - relative) <= scale,
           f"<rope(q, {m}), rope(k, {n})> = {base_score:.6g} but <rope(q, {m + s}), rope(k, {n + s})> = {shifted:.6g} "
           f"and <rope(q, 0), rope(k, {n - m})> = {relative:.6g}: scores must depend only on the offset n - m "
           "(rotate each pair by position * w_j, with the same w_j for every position)")


@suite.case(1, public=True)
def alibi_slopes_properties(student):
    """alibi_slopes(n), n = 1..16: slopes in (0, 1); 8 heads get 1/2, 1/4, ..., 1/256; other n follow P4's powers-of-two rule"""
    slopes = {}
    for n in range(1, 17):
        call = f"alibi_slopes({n})"
        s = expect_tensor(student.call(SLOPES, n), (n,), call)
        expect(s.is_floating_point(), f"{call} has dtype {s.dtype}, expected floating point")
        expect(bool(((s > 0) & (s < 1)).all()),
               f"{call} = {s.tolist()}: every slope lies strictly between 0 and 1 (m_h = 2 ** (-8 h / n) counts h from 1)")
        slopes[n] = s.to(torch.float64)
    eight = 2.0 ** -torch.arange(1, 9, dtype=torch.float64)
    expect_close(slopes[8], eight, "alibi_slopes(8)", atol=1e-7, rtol=1e-5,
                 hint="8 heads get 2^-1, 2^-2, ..., 2^-8 (m_h = 2 ** (-8 h / n), h = 1..n)",
                 diagnoses={"the slopes are in reverse order (head 0 gets the largest slope)": eight.flip(0),
                            "h starts at 0 (h = 1..n: the first slope is 2 ** (-8 / n), not 1)": eight * 2})
    for n in (2, 4, 16):
        expect(bool((slopes[n][1:] < slopes[n][:-1]).all()),
               f"alibi_slopes({n}) = {slopes[n].tolist()}: for a power of two the slopes decrease from head to head")
    for n in range(3, 16):
        p = 1 << (n.bit_length() - 1)
        if p == n:
            continue
        expect_close(slopes[n][:p], slopes[p], f"alibi_slopes({n})[:{p}]", atol=1e-7, rtol=1e-5,
                     hint=f"P4: {n} is not a power of two, so its first {p} slopes are alibi_slopes({p})",
                     diagnoses={"2 ** (-8 h / n) is used for every n: that rule holds only when n_heads is a power of two":
                                _geometric(n)[:p]})
        expect_close(slopes[n][p:], slopes[2 * p][0::2][: n - p], f"alibi_slopes({n})[{p}:]", atol=1e-7, rtol=1e-5,
                     hint=f"P4: after the {p} slopes of alibi_slopes({p}) come the first {n - p} slopes of "
                          f"alibi_slopes({2 * p}) taken at even indices 0, 2, 4, ...")


@suite.case(1, public=True)
@given(n_heads=st.integers(1, 8), n_q=st.integers(1, 7), n_k=st.none() | st.integers(1, 7))
def alibi_bias_properties(student, n_heads, n_q, n_k):
    """alibi_bias(n_heads, n_q, n_k) is (n_heads, n_q, n_k) (n_k defaults to n_q), 0 on the diagonal, <= 0, linear in |i - j|"""
    args = (n_heads, n_q) if n_k is None else (n_heads, n_q, n_k)
    call = f"alibi_bias({', '.join(map(str, args))})"
    n_k = n_q if n_k is None else n_k
    bias = expect_tensor(student.call(BIAS, *args), (n_heads, n_q, n_k), call)
    expect(bias.is_floating_point() and bool(torch.isfinite(bias).all()), f"{call} should be finite floats, got {bias.dtype}")
    bias = bias.to(torch.float64)
    diagonal = bias.diagonal(dim1=1, dim2=2).abs().max().item()
    expect(diagonal <= 1e-7, f"{call} is {diagonal:.3g} on the diagonal i = j: a key at distance 0 gets no bias")
    if bias.max().item() > 1e-7:
        h, i, j = (int(v) for v in (bias == bias.max()).nonzero()[0])
        raise Failed(f"{call}[{h}, {i}, {j}] = {bias[h, i, j].item():.4g} > 0: -m_h |i - j| is never positive, it penalises "
                     "distant keys (is the sign flipped, or is |i - j| missing its absolute value?)")
    if n_q * n_k > 1:
        slope = -(bias[:, 0, 1] if n_k > 1 else bias[:, 1, 0])
        expect_close(bias, -slope[:, None, None] * _distance(n_q, n_k).abs(), call, atol=1e-6, rtol=1e-5,
                     hint="bias[h, i, j] = -m_h |i - j| depends only on the distance |i - j|, linearly, with one slope per head")


@suite.case(1, public=True)
@settings(max_examples=4)
@given(half=st.integers(0, 7), seed=seeds)
def odd_dimensions_raise(student, half, seed):
    """an odd d_model (sinusoidal_encoding, shift_rotation) or odd last dimension (apply_rope) raises ValueError naming it"""
    d = 2 * half + 1
    expect_value_error(lambda: student.call(SIN, 4, d), f"sinusoidal_encoding(4, d_model={d})", ("d_model",))
    expect_value_error(lambda: student.call(SHIFT, 1, d), f"shift_rotation(1, d_model={d})", ("d_model",))
    expect_value_error(lambda: student.call(ROPE, randn(seed, 3, d)), f"apply_rope(x) with x of shape (3, {d})",
                       ("x", "even", "d"))


# -- hidden: against the reference ------------------------------------------------------------------

@suite.case(2)
@given(n=st.integers(1, 128), d=even_dims, base=bases)
def sinusoidal_matches_reference(student, n, d, base):
    """sinusoidal_encoding matches (P1) for random n <= 128, d_model and base"""
    call = f"sinusoidal_encoding({n}, {d}{_shown(base)})"
    table = student.call(SIN, n, d, **_kw(base))
    expected = ref.positional.sinusoidal_encoding(n, d, **_kw(base))
    i, w = torch.arange(n), _w(d, base)
    mistakes = lambda: {
        "sin and cos are swapped (the even columns 2j hold sin, the odd columns 2j+1 cos)": _table(i, w, swap=True),
        "the table is laid out as [sin | cos] halves (as fairseq and tensor2tensor do) instead of interleaved "
        "columns 2j (sin) and 2j+1 (cos)": _table(i, w, halves=True),
        "the positions start at 1 instead of 0 (row i is position i)": _table(i + 1, w),
        **{sentence: _table(i, wrong) for sentence, wrong in _frequency_mistakes(d, base).items()},
    }
    expect_close(table, expected, call, atol=3e-5, rtol=0, diagnoses=mistakes,
                 hint="P[i, 2j] = sin(i * w_j), P[i, 2j+1] = cos(i * w_j) with w_j = base ** (-2j / d_model)")


@suite.case(1)
@given(delta=st.integers(-128, 128), d=even_dims, base=bases)
def shift_rotation_matches_reference(student, delta, d, base):
    """shift_rotation matches (P2) for random delta (negative too), d_model and base"""
    call = f"shift_rotation({delta}, {d}{_shown(base)})"
    m = student.call(SHIFT, delta, d, **_kw(base))
    expected = ref.positional.shift_rotation(delta, d, **_kw(base))
    w = _w(d, base)
    mistakes = lambda: {
        "the matrix is transposed, which is the rotation by -delta (block j must be [[cos, sin], [-sin, cos]] "
        "of the angle delta * w_j)": _rotation(-delta, w),
        "the 2x2 blocks act on the pairs (j, j + d/2) instead of the interleaved pairs (2j, 2j+1)":
            _rotation(delta, w, halves=True),
        **{sentence: _rotation(delta, wrong) for sentence, wrong in _frequency_mistakes(d, base).items()},
    }
    expect_close(m, expected, call, atol=5e-5, rtol=0, diagnoses=mistakes,
                 hint="block j, on the pair (2j, 2j+1), is [[cos, sin], [-sin, cos]] of delta * w_j, zeros elsewhere")


@suite.case(2)
@given(inputs=_rope_inputs(), seed=seeds, dtype=dtypes)
def rope_matches_reference(student, inputs, seed, dtype):
    """apply_rope matches (P3) on random x, positions (default or given, negative too), base and dtype"""
    T, d, positions, base = inputs["T"], inputs["d"], inputs["positions"], inputs["base"]
    x = randn(seed, *inputs["lead"], T, d, dtype=dtype)
    kwargs = {**({} if positions is None else {"positions": positions}), **_kw(base)}
    shown = ", ".join(["x"] + [f"{key}={value.tolist() if key == 'positions' else value}" for key, value in kwargs.items()])
    out = student.call(ROPE, x, **kwargs)
    expected = ref.positional.apply_rope(x, positions, **_kw(base))
    at = torch.arange(T) if positions is None else positions
    w = _w(d, base)
    def mistakes() -> dict[str, torch.Tensor]:
        found = {
            "the pairs are (j, j + d/2) (the rotate-half layout of HF and GPT-NeoX) instead of the interleaved "
            "pairs (2j, 2j+1)": _rope(x, at, w, halves=True),
            "the rotation goes the wrong way: angle -a instead of a (the sin terms have the wrong sign)":
                _rope(x, at, w, sign=-1.0),
            **{sentence: _rope(x, at, wrong) for sentence, wrong in _frequency_mistakes(d, base).items()},
        }
        if positions is not None:
            found["the positions argument is ignored (arange(T) is used instead)"] = _rope(x, torch.arange(T), w)
        return found

    tol = 1e-4 if dtype == torch.float32 else 5e-5
    expect_close(out, expected, f"apply_rope({shown}) with x of shape {tuple(x.shape)}, {dtype}", atol=tol, rtol=tol,
                 diagnoses=mistakes,
                 hint="x'[2j] = x[2j] cos a - x[2j+1] sin a, x'[2j+1] = x[2j] sin a + x[2j+1] cos a, "
                      "a = positions[t] * base ** (-2j / d)")


@suite.case(1)
def alibi_slopes_matches_reference(student):
    """alibi_slopes(n) matches (P4) for n = 1..16, powers of two or not (6 and 12 heads among them)"""
    for n in range(1, 17):
        expected = ref.positional.alibi_slopes(n)
        expect_close(student.call(SLOPES, n), expected, f"alibi_slopes({n})", atol=1e-7, rtol=1e-5,
                     diagnoses=_slope_mistakes(n, expected),
                     hint="P4: for a power of two m_h = 2 ** (-8 h / n), h = 1..n; otherwise the slopes for the largest "
                          "power of two p below n, then the first n - p slopes for 2p at even indices")


@suite.case(1)
@given(n_heads=st.integers(1, 12), n_q=st.integers(1, 8), n_k=st.none() | st.integers(1, 8))
def alibi_bias_matches_reference(student, n_heads, n_q, n_k):
    """alibi_bias matches (P5) for random n_heads (powers of two or not), n_q and n_k (default or not)"""
    args = (n_heads, n_q) if n_k is None else (n_heads, n_q, n_k)
    bias = student.call(BIAS, *args)
    expected = ref.positional.alibi_bias(*args)
    slopes = ref.positional.alibi_slopes(n_heads).to(torch.float64)[:, None, None]
    distance = _distance(n_q, n_q if n_k is None else n_k)
    mistakes = {
        "the sign is flipped: the bias is -m_h |i - j| (never positive), penalising distant keys": slopes * distance.abs(),
        "the distance has no absolute value (-m_h (i - j) instead of -m_h |i - j|)": -slopes * distance,
        "the distance has no absolute value (-m_h (j - i) instead of -m_h |i - j|)": slopes * distance,
        **{f"the slopes are wrong (fix alibi_slopes first): {sentence}": -wrong[:, None, None] * distance.abs()
           for sentence, wrong in _slope_mistakes(n_heads, slopes.flatten()).items()},
    }
    expect_close(bias, expected, f"alibi_bias({', '.join(map(str, args))})", atol=1e-6, rtol=1e-5, diagnoses=mistakes,
                 hint="bias[h, i, j] = -m_h |i - j| with m = alibi_slopes(n_heads) (check alibi_slopes first if it fails)")
