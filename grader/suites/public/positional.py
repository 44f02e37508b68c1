"""positional.py, public cases: properties of the student's own outputs, and (P3) on
small inputs computed here from its definition; no reference.

P1 sinusoidal_table_properties 1 · P2 shift_rotation_moves_rows 1, shift_rotation_is_a_rotation 1 ·
P3 rope_keeps_shape_dtype_and_lengths 1, rope_scores_depend_on_offset 1, rope_matches_definition 1,
rope_computes_in_input_dtype 0.5 ·
P4 alibi_slopes_properties 1 · P5 alibi_bias_properties 1 · P1-P3 odd_dimensions_raise 1.

Tolerances rest on docs/spec.md ("Tolerances"): a float32 table computed natively differs from
the float64 one by up to ~1e-5 for n <= 128 (so positions stay <= 128), and RoPE computed with
float32 frequencies is off by ~1e-5 even for float64 inputs: both are accepted by the value tests. One rule,
one test: the contract says to compute in the inputs' dtype, and rope_computes_in_input_dtype alone fails
RoPE computed in float32 for float64 inputs.
"""
import itertools
import math

import torch
from hypothesis import example, given
from hypothesis import strategies as st

from ...spec import FLOAT32_TABLE_TOLERANCE, Tolerance, Visibility
from .. import Suite
from ..checks import Failed, expect, expect_close, expect_tensor, expect_value_error, telling
from ..strategies import batch_dims, dtypes, randn, seeds

suite = Suite("positional", Visibility.PUBLIC)
SIN, SHIFT, ROPE = "positional.sinusoidal_encoding", "positional.shift_rotation", "positional.apply_rope"
SLOPES, BIAS = "positional.alibi_slopes", "positional.alibi_bias"

even_dims = st.integers(1, 32).map(lambda half: 2 * half)
rope_dims = st.integers(1, 8).map(lambda half: 2 * half)
bases = st.sampled_from([None, 10000.0, 100.0, 500.0])  # None: the default base, not passed


@st.composite
def row_shifts(draw: st.DrawFn) -> tuple[int, int]:
    """A table length n <= 128 and a shift delta with |delta| < n (negative too)."""
    n = draw(st.integers(2, 128))
    return n, draw(st.integers(-(n - 1), n - 1))


def base_kwargs(base: float | None) -> dict:
    """The base argument as passed: not at all for the default."""
    return {} if base is None else {"base": base}


def shown(base: float | None) -> str:
    """The base argument as shown in a call, after the others."""
    return "" if base is None else f", base={base:g}"


def geometric_slopes(n: int, start: int = 1) -> torch.Tensor:
    """2 ** (-8 h / n) for h = start..start + n - 1: P4's slopes when n is a power of two."""
    return 2.0 ** (-8.0 * torch.arange(start, start + n, dtype=torch.float64) / n)


def distances(n_q: int, n_k: int) -> torch.Tensor:
    """i - j for query i and key j, (n_q, n_k), float64."""
    return (torch.arange(n_q)[:, None] - torch.arange(n_k)[None, :]).to(torch.float64)


def narrow(d: int, **_: object) -> bool:
    """d_model = 2: one pair, where layout and frequency mistakes look alike (and some crash)."""
    return d <= 2


TYPICAL_TABLE = {"n": 16, "d": 8, "base": None, "shift": (16, 3)}
"""A table of four pairs and sixteen rows, shifted by 3: where each layout and frequency mistake shows."""


@suite.case(1, max_examples=8)
@given(n=st.integers(1, 128), d=even_dims, base=bases)
@telling(narrow, TYPICAL_TABLE)
def sinusoidal_table_properties(student, n, d, base):
    """sinusoidal_encoding is a float32 (n, d_model) table: row 0 is [0, 1, 0, 1, ...], each pair (2j, 2j+1)
    on the unit circle"""
    call = f"sinusoidal_encoding({n}, {d}{shown(base)})"
    table = expect_tensor(student.call(SIN, n, d, **base_kwargs(base)), (n, d), call)
    expect(table.dtype == torch.float32, f"{call} has dtype {table.dtype}, expected torch.float32 (SPEC P1)")
    expect(bool(torch.isfinite(table).all()), f"{call} contains NaN or inf")
    expect(table.abs().max().item() <= 1 + 1e-6,
           f"{call} has entries of size {table.abs().max().item():.3g}: every entry is a sin or a cos, "
           "within [-1, 1]")
    row0 = torch.tensor([0.0, 1.0] * (d // 2), dtype=torch.float64)
    halves = torch.tensor([0.0] * (d // 2) + [1.0] * (d // 2), dtype=torch.float64)
    # sin 0 and cos 0 are exact in float32 too
    expect_close(table[0], row0, f"row 0 of {call}", atol=1e-6,
                 hint="position 0 has angle 0 in every pair: sin 0 = 0 in the even columns 2j, cos 0 = 1 in "
                      "the odd columns 2j+1",
                 diagnoses={
                     "sin and cos are swapped (the even columns 2j hold sin, the odd columns 2j+1 cos)":
                         row0.roll(1),
                     "the table is laid out as [sin | cos] halves instead of interleaved columns 2j (sin) "
                     "and 2j+1 (cos)": halves})
    radius = table.to(torch.float64).unflatten(1, (d // 2, 2)).square().sum(-1)
    # sin^2 + cos^2 of float32 values: two float32 roundings of numbers <= 1
    expect_close(radius, torch.ones(n, d // 2, dtype=torch.float64), f"P[i, 2j]^2 + P[i, 2j+1]^2 in {call}",
                 atol=2e-5, hint="the columns 2j and 2j+1 hold sin and cos of the same angle i * w_j")


def _on_circle(table: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether the columns `first` and `second` of the table are a cos and a sin of one angle, row by row."""
    radius = table[:, first].square() + table[:, second].square()
    return torch.allclose(radius, torch.ones_like(radius), atol=2e-5, rtol=0)


def expect_interleaved(table: torch.Tensor, call: str) -> None:
    """The table's pairs are the interleaved columns (2j, 2j+1) that shift_rotation turns; a table laid
    out as [sin | cos] halves fails every rotation check, so it is named before them."""
    d = table.shape[1]
    table = table.to(torch.float64)
    j = torch.arange(d // 2)
    expect(_on_circle(table, 2 * j, 2 * j + 1) or not _on_circle(table, j, j + d // 2),
           f"your table is laid out as [sin | cos] halves: {call} holds sin and cos of one angle in the "
           "columns j and j + d_model/2, but M turns the interleaved pairs (2j, 2j+1) (P1: sin in column 2j, "
           "cos in column 2j+1), so M @ P[i] cannot be P[i + delta]")


@suite.case(1, max_examples=8)
@given(shift=row_shifts(), d=even_dims, base=bases)
@telling(narrow, TYPICAL_TABLE)
def shift_rotation_moves_rows(student, shift, d, base):
    """shift_rotation(delta) maps every row of your table to the row delta later: P[i + delta] = M @ P[i],
    delta negative too"""
    n, delta = shift
    table = expect_tensor(student.call(SIN, n, d, **base_kwargs(base)), (n, d),
                          f"sinusoidal_encoding({n}, {d}{shown(base)})")
    expect_interleaved(table, f"sinusoidal_encoding({n}, {d}{shown(base)})")
    call = f"shift_rotation({delta}, {d}{shown(base)})"
    m = expect_tensor(student.call(SHIFT, delta, d, **base_kwargs(base)), (d, d), call).to(torch.float64)
    rows = torch.arange(max(0, -delta), min(n, n - delta))
    p, target = table.to(torch.float64)[rows], table.to(torch.float64)[rows + delta]
    # A float32 table rotated by angles up to 128 rad: ~1e-5 of rounding, far below any mistake.
    moved = p @ m.T
    backwards = torch.allclose(p @ m, target, atol=1e-3, rtol=0)
    if not torch.allclose(moved, target, atol=1e-4, rtol=0) and backwards:
        raise Failed(f"{call} @ P[i] gives P[i - delta] instead of P[i + delta]: your M moves rows the "
                     "wrong way. Either M is transposed (that is the rotation by -delta: block j must be "
                     "[[cos, sin], [-sin, cos]] of delta * w_j), or your table has sin and cos swapped (P1: "
                     "sin in the even columns)")
    first = rows[0].item()
    expect_close(moved, target, f"{call} @ P[i] for i = {first}.. (row r is i = {first} + r)",
                 atol=1e-4, rtol=0,
                 hint=f"it should equal P[i + {delta}] of your sinusoidal_encoding table: block j of M "
                      "rotates the pair (2j, 2j+1) by delta * w_j, with the frequencies w_j of the table")


@suite.case(1, max_examples=8)
@given(d=even_dims, a=st.integers(-64, 64), b=st.integers(-64, 64), base=bases)
def shift_rotation_is_a_rotation(student, d, a, b, base):
    """shift_rotation(0) = I; M is orthogonal and block diagonal on the pairs (2j, 2j+1); M(a) @ M(b) = M(a +
    b)"""
    def rotation(delta: int) -> torch.Tensor:
        call = f"shift_rotation({delta}, {d}{shown(base)})"
        m = expect_tensor(student.call(SHIFT, delta, d, **base_kwargs(base)), (d, d), call)
        expect(m.is_floating_point() and bool(torch.isfinite(m).all()),
               f"{call} should be a finite float tensor, got {m.dtype}")
        return m.to(torch.float64)

    # Tolerances grow with the float32 rounding each identity accumulates: none for M(0), one
    # product for M M^T, angles up to 128 rad for M(a) M(b).
    eye = torch.eye(d, dtype=torch.float64)
    expect_close(rotation(0), eye, f"shift_rotation(0, {d}{shown(base)})", atol=1e-6,
                 hint="a shift by 0 leaves every row alone: M is the identity")
    ma, mb, mab = rotation(a), rotation(b), rotation(a + b)
    pair = torch.arange(d) // 2
    outside = ma.masked_fill(pair[:, None] == pair[None, :], 0.0).abs()
    expect(outside.max().item() <= 1e-6,
           f"shift_rotation({a}, {d}) has {outside.max().item():.3g} at "
           f"{tuple(divmod(outside.argmax().item(), d))}: M is block diagonal, each 2x2 block acting on one "
           "interleaved pair (2j, 2j+1)")
    expect_close(ma @ ma.T, eye, f"M @ M^T for M = shift_rotation({a}, {d})", atol=1e-5,
                 hint="M is a rotation, so it is orthogonal: each block is [[cos, sin], [-sin, cos]] of one "
                      "angle")
    expect_close(ma @ mb, mab, f"shift_rotation({a}) @ shift_rotation({b}) (d_model={d})", atol=1e-4, rtol=0,
                 hint=f"shifting by {a} and then by {b} is shifting by {a + b}: block j's angle is "
                      "delta * w_j")


@suite.case(1)
@given(lead=batch_dims, T=st.integers(1, 6), d=rope_dims, seed=seeds, dtype=dtypes)
def rope_keeps_shape_dtype_and_lengths(student, lead, T, d, seed, dtype):
    """apply_rope keeps x's shape, dtype, position 0 and each pair (x[2j], x[2j+1])'s length; positions
    defaults to arange(T)"""
    x = randn(seed, *lead, T, d, dtype=dtype)
    call = f"apply_rope(x) with x of shape {tuple(x.shape)}"
    out = expect_tensor(student.call(ROPE, x), x.shape, call)
    expect(out.dtype == dtype, f"x is {dtype} but {call} is {out.dtype}: compute in the input's dtype")
    expect(bool(torch.isfinite(out).all()), f"{call} contains NaN or inf")
    tol = FLOAT32_TABLE_TOLERANCE._asdict()  # float32 cos/sin tables are accepted, for float64 x too
    x64, out64 = x.to(torch.float64), out.to(torch.float64)
    expect_close(out64.norm(dim=-1), x64.norm(dim=-1), f"the norm of each vector of {call}", **tol,
                 hint="RoPE rotates, so it keeps the norm of every vector")
    expect_close(out64.unflatten(-1, (d // 2, 2)).norm(dim=-1), x64.unflatten(-1, (d // 2, 2)).norm(dim=-1),
                 f"the length of each pair (x[2j], x[2j+1]) of {call}", **tol,
                 hint="P3 rotates the interleaved pairs (2j, 2j+1), so each keeps its length; pairs "
                      "(j, j + d/2) are the rotate-half layout, a different function")
    expect_close(out64[..., 0, :], x64[..., 0, :], f"position 0 of {call}", **tol,
                 hint="position 0 has angle 0: RoPE leaves it unchanged")
    explicit = student.call(ROPE, x, positions=torch.arange(T))
    expect_close(explicit, out64, f"apply_rope(x, positions=torch.arange({T}))", **tol,
                 hint="positions defaults to arange(T): both calls must agree")


@suite.case(1)
@given(d=rope_dims, m=st.integers(-40, 40), n=st.integers(-40, 40), s=st.integers(-40, 40), seed=seeds)
def rope_scores_depend_on_offset(student, d, m, n, s, seed):
    """<rope(q, m), rope(k, n)> depends only on n - m (positions given as a tensor), and equals <q, k> when m
    = n"""
    q, k = randn(seed, d), randn(seed + 1, d)
    x = torch.stack([q, k])
    # float32 angles up to 80 rad, relative to the size of the score
    scale = 1e-5 * (1 + q.norm().item() * k.norm().item())

    def score(i: int, j: int) -> float:
        out = expect_tensor(student.call(ROPE, x, positions=torch.tensor([i, j])), (2, d),
                            f"apply_rope(x, positions=torch.tensor([{i}, {j}])) with x of shape (2, {d})")
        return float(out[0].to(torch.float64) @ out[1].to(torch.float64))

    same, plain = score(m, m), float(q @ k)
    expect(abs(same - plain) <= scale,
           f"q and k both at position {m}: <rope(q), rope(k)> = {same:.6g}, expected <q, k> = {plain:.6g}: "
           "equal positions get the same rotation, which keeps dot products (is the positions argument "
           "used?)")
    base_score, shifted, relative = score(m, n), score(m + s, n + s), score(0, n - m)
    expect(abs(base_score - shifted) <= scale and abs(base_score - relative) <= scale,
           f"<rope(q, {m}), rope(k, {n})> = {base_score:.6g} but <rope(q, {m + s}), rope(k, {n + s})> = "
           f"{shifted:.6g} and <rope(q, 0), rope(k, {n - m})> = {relative:.6g}: scores must depend only on "
           "the offset n - m (rotate each pair by position * w_j, with the same w_j for every position)")


def rope_by_definition(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """(P3) in float64, one pair at a time as the formula reads: (x[2j], x[2j+1]) at position t
    rotated by the angle positions[t] * base ** (-2j / d)."""
    d = x.shape[-1]
    out = torch.zeros(x.shape, dtype=torch.float64)
    for index in itertools.product(*(range(n) for n in x.shape[:-1])):
        position = float(positions[index[-1]])
        for j in range(d // 2):
            a = position * base ** (-2 * j / d)
            first, second = float(x[index][2 * j]), float(x[index][2 * j + 1])
            out[index][2 * j] = first * math.cos(a) - second * math.sin(a)
            out[index][2 * j + 1] = first * math.sin(a) + second * math.cos(a)
    return out


@suite.case(1, max_examples=8)
@given(lead=batch_dims, T=st.integers(1, 5), d=rope_dims, seed=seeds, base=bases,
       given_positions=st.booleans())
def rope_matches_definition(student, lead, T, d, seed, base, given_positions):
    """apply_rope gives (P3), computed here from the definition on small float64 inputs, default or given
    positions"""
    x = randn(seed, *lead, T, d)
    kwargs = base_kwargs(base)
    positions = torch.arange(T)
    if given_positions:
        positions = torch.randint(-8, 9, (T,), generator=torch.Generator().manual_seed(seed))
        kwargs["positions"] = positions
    call = f"apply_rope(x{', positions=' + str(positions.tolist()) if given_positions else ''}{shown(base)})"
    expected = rope_by_definition(x, positions, 10000.0 if base is None else base)
    expect_close(student.call(ROPE, x, **kwargs), expected, f"{call} with x of shape {tuple(x.shape)}",
                 **FLOAT32_TABLE_TOLERANCE._asdict(),  # float32 cos/sin tables are accepted
                 hint="(P3) turns each interleaved pair (x[2j], x[2j+1]) at position t by the angle "
                      "a = positions[t] * base ** (-2j / d): look at the pairs, the direction of the "
                      "rotation (the signs of the sin terms) and the angles")


FLOAT64_PRECISION = Tolerance(atol=1e-10, rtol=1e-10)
"""Float64 RoPE written any correct way agrees with (P3) to about 1e-14; float32 anywhere on the way
(frequencies, angles, cos or sin) costs 1e-8 or more, already at position 1."""


@suite.case(0.5)
@example(positions=[0, 1, 127, -128], d=8, seed=0)
@given(positions=st.lists(st.integers(-128, 128), min_size=2, max_size=6), d=rope_dims, seed=seeds)
def rope_computes_in_input_dtype(student, positions, d, seed):
    """apply_rope on float64 x computes in float64 (frequencies, angles, cos and sin), as the contract asks"""
    x = randn(seed, len(positions), d)
    out = student.call(ROPE, x, positions=torch.tensor(positions))
    what = f"apply_rope(x, positions={positions}) with float64 x of shape {tuple(x.shape)}"
    expect_close(out, rope_by_definition(x, torch.tensor(positions), 10000.0), what,
                 **FLOAT64_PRECISION._asdict(), float64=True,
                 hint="far more than rounding: (P3) itself is not followed (see rope_matches_definition)")


@suite.case(1)
def alibi_slopes_properties(student):
    """alibi_slopes(n), n = 1..16: slopes in (0, 1); 8 heads get 1/2, 1/4, ..., 1/256; other n follow P4's
    powers-of-two rule"""
    slopes = {}
    for n in range(1, 17):
        call = f"alibi_slopes({n})"
        s = expect_tensor(student.call(SLOPES, n), (n,), call)
        expect(s.is_floating_point(), f"{call} has dtype {s.dtype}, expected floating point")
        expect(bool(((s > 0) & (s < 1)).all()),
               f"{call} = {s.tolist()}: every slope lies strictly between 0 and 1 (m_h = 2 ** (-8 h / n) "
               "counts h from 1)")
        slopes[n] = s.to(torch.float64)
    # Powers of two: float32 holds them exactly, so only the rounding of the float32 arithmetic remains.
    tol = {"atol": 1e-7, "rtol": 1e-5}
    eight = 2.0 ** -torch.arange(1, 9, dtype=torch.float64)
    expect_close(slopes[8], eight, "alibi_slopes(8)", **tol,
                 hint="8 heads get 2^-1, 2^-2, ..., 2^-8 (m_h = 2 ** (-8 h / n), h = 1..n)",
                 diagnoses={"the slopes are in reverse order (head 0 gets the largest slope)": eight.flip(0),
                            "h starts at 0 (h = 1..n: the first slope is 2 ** (-8 / n), not 1)": eight * 2})
    for n in (2, 4, 16):
        expect(bool((slopes[n][1:] < slopes[n][:-1]).all()),
               f"alibi_slopes({n}) = {slopes[n].tolist()}: for a power of two the slopes decrease from head "
               "to head")
    for n in range(3, 16):
        p = 1 << (n.bit_length() - 1)
        if p == n:
            continue
        expect_close(slopes[n][:p], slopes[p], f"alibi_slopes({n})[:{p}]", **tol,
                     hint=f"P4: {n} is not a power of two, so its first {p} slopes are alibi_slopes({p})",
                     diagnoses={"2 ** (-8 h / n) is used for every n: that rule holds only when n_heads is a "
                                "power of two": geometric_slopes(n)[:p]})
        expect_close(slopes[n][p:], slopes[2 * p][0::2][: n - p], f"alibi_slopes({n})[{p}:]", **tol,
                     hint=f"P4: after the {p} slopes of alibi_slopes({p}) come the first {n - p} slopes of "
                          f"alibi_slopes({2 * p}) taken at even indices 0, 2, 4, ...")


@suite.case(1)
@given(n_heads=st.integers(1, 8), n_q=st.integers(1, 7), n_k=st.none() | st.integers(1, 7))
def alibi_bias_properties(student, n_heads, n_q, n_k):
    """alibi_bias(n_heads, n_q, n_k) is (n_heads, n_q, n_k) (n_k defaults to n_q), 0 on the diagonal, <= 0,
    linear in |i - j|"""
    args = (n_heads, n_q) if n_k is None else (n_heads, n_q, n_k)
    call = f"alibi_bias({', '.join(map(str, args))})"
    n_keys = n_q if n_k is None else n_k
    bias = expect_tensor(student.call(BIAS, *args), (n_heads, n_q, n_keys), call)
    expect(bias.is_floating_point() and bool(torch.isfinite(bias).all()),
           f"{call} should be finite floats, got {bias.dtype}")
    bias = bias.to(torch.float64)
    diagonal = bias.diagonal(dim1=1, dim2=2).abs().max().item()
    expect(diagonal <= 1e-7,
           f"{call} is {diagonal:.3g} on the diagonal i = j: a key at distance 0 gets no bias")
    if bias.max().item() > 1e-7:
        h, i, j = (int(v) for v in (bias == bias.max()).nonzero()[0])
        raise Failed(f"{call}[{h}, {i}, {j}] = {bias[h, i, j].item():.4g} > 0: -m_h |i - j| is never "
                     "positive, it penalises distant keys (is the sign flipped, or is |i - j| missing its "
                     "absolute value?)")
    if n_q * n_keys > 1:
        slope = -(bias[:, 0, 1] if n_keys > 1 else bias[:, 1, 0])
        expect_close(bias, -slope[:, None, None] * distances(n_q, n_keys).abs(), call, atol=1e-6, rtol=1e-5,
                     hint="bias[h, i, j] = -m_h |i - j| depends only on the distance |i - j|, linearly, with "
                          "one slope per head")


@suite.case(1, max_examples=4)
@given(half=st.integers(0, 7), seed=seeds)
def odd_dimensions_raise(student, half, seed):
    """an odd d_model (sinusoidal_encoding, shift_rotation) or odd last dimension (apply_rope) raises
    ValueError naming it"""
    d = 2 * half + 1
    expect_value_error(lambda: student.call(SIN, 4, d), f"sinusoidal_encoding(4, d_model={d})", ("d_model",))
    expect_value_error(lambda: student.call(SHIFT, 1, d), f"shift_rotation(1, d_model={d})", ("d_model",))
    expect_value_error(lambda: student.call(ROPE, randn(seed, 3, d)),
                       f"apply_rope(x) with x of shape (3, {d})", ("x", "even", "d"))
