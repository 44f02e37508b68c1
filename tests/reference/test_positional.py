"""positional.py: sinusoidal table (P1), its shift rotation (P2), RoPE (P3), ALiBi (P4, P5)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.suites.strategies import randn
from helpers import assert_close, seeds
from solutions.positional import alibi_bias, alibi_slopes, apply_rope, shift_rotation, sinusoidal_encoding

even_dims = st.integers(1, 16).map(lambda half: 2 * half)
positions = st.integers(-50, 50)


def press_slopes(n: int) -> list[float]:
    """The slopes of the official ALiBi code (ofirpress/attention_with_linear_biases)."""
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + press_slopes(2 * closest)[0::2][: n - closest]


@given(n=st.integers(1, 128), d_model=even_dims)
def test_sinusoidal_follows_p1(n: int, d_model: int) -> None:
    table = sinusoidal_encoding(n, d_model)
    assert table.shape == (n, d_model) and table.dtype == torch.float32
    i = torch.arange(n, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    # Float32 rounding of angles up to 128 rad is ~1e-5 (see NOTES.md).
    assert_close(table[:, 0::2].double(), torch.sin(i * w), rtol=0, atol=2e-5)
    assert_close(table[:, 1::2].double(), torch.cos(i * w), rtol=0, atol=2e-5)


def test_sinusoidal_base_sets_the_frequencies() -> None:
    """With base 16 and d_model 4 the frequencies are 1 and 1/4."""
    table = sinusoidal_encoding(3, 4, base=16.0).double()
    i = torch.arange(3, dtype=torch.float64)
    expected = torch.stack([i.sin(), i.cos(), (i / 4).sin(), (i / 4).cos()], dim=1)
    assert_close(table, expected, rtol=0, atol=1e-6)


@given(d_model=even_dims, delta=st.integers(-20, 20))
def test_shift_rotation_maps_every_row_to_the_row_delta_later(d_model: int, delta: int) -> None:
    table = sinusoidal_encoding(64, d_model).double()
    rotation = shift_rotation(delta, d_model).double()
    rows = torch.arange(max(0, -delta), min(64, 64 - delta))
    assert_close(table[rows] @ rotation.T, table[rows + delta], rtol=0, atol=1e-5)


@given(d_model=even_dims, delta=positions)
def test_shift_rotation_is_orthogonal_and_inverted_by_minus_delta(d_model: int, delta: int) -> None:
    rotation = shift_rotation(delta, d_model).double()
    identity = torch.eye(d_model, dtype=torch.float64)
    assert_close(rotation @ rotation.T, identity, rtol=0, atol=1e-6)
    assert_close(shift_rotation(-delta, d_model).double(), rotation.T, rtol=0, atol=1e-6)


def test_shift_rotation_block_sign_convention() -> None:
    """Block 0 is [[cos d, sin d], [-sin d, cos d]] (its transpose shifts the other way)."""
    c, s = math.cos(1.0), math.sin(1.0)
    expected = torch.tensor([[c, s], [-s, c]])
    assert_close(shift_rotation(1, 2), expected, rtol=0, atol=1e-6)
    assert shift_rotation(1, 4)[:2, 2:].abs().max() == 0  # block diagonal


def rope_formula(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """(P3) written out pair by pair."""
    out = torch.empty_like(x)
    d = x.size(-1)
    for j in range(d // 2):
        angle = positions.double() * base ** (-2 * j / d)
        cos, sin = angle.cos()[:, None].to(x), angle.sin()[:, None].to(x)
        even, odd = x[..., 2 * j:2 * j + 1], x[..., 2 * j + 1:2 * j + 2]
        out[..., 2 * j:2 * j + 1] = even * cos - odd * sin
        out[..., 2 * j + 1:2 * j + 2] = even * sin + odd * cos
    return out


@given(d=even_dims, T=st.integers(1, 6), seed=seeds, base=st.sampled_from([100.0, 10000.0]))
def test_apply_rope_follows_p3_interleaved(d: int, T: int, seed: int, base: float) -> None:
    x = randn(seed, 2, T, d)
    positions = torch.randint(0, 100, (T,), generator=torch.Generator().manual_seed(seed))
    assert_close(apply_rope(x, positions, base=base), rope_formula(x, positions, base))
    assert_close(apply_rope(x, base=base), rope_formula(x, torch.arange(T), base))


@given(d=even_dims, seed=seeds)
def test_apply_rope_keeps_shape_dtype_and_norms(d: int, seed: int) -> None:
    for dtype in (torch.float32, torch.float64):
        x = randn(seed, 3, 2, 5, d, dtype=dtype)
        rotated = apply_rope(x)
        assert rotated.shape == x.shape and rotated.dtype == dtype
        assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
        assert_close(rotated[..., 0, :], x[..., 0, :])  # position 0 is not rotated


@given(d=even_dims, m=positions, n=positions, shift=positions, seed=seeds)
def test_rope_scores_depend_only_on_relative_position(d: int, m: int, n: int, shift: int, seed: int) -> None:
    q, k = randn(seed, 1, d), randn(seed + 1, 1, d)

    def score(m: int, n: int) -> torch.Tensor:
        return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum()

    assert_close(score(m + shift, n + shift), score(m, n))


@settings(max_examples=5)
@given(d=st.sampled_from([2, 4]), seed=seeds)
def test_apply_rope_gradcheck(d: int, seed: int) -> None:
    x = randn(seed, 2, 3, d).requires_grad_()
    assert torch.autograd.gradcheck(apply_rope, (x,))


def test_alibi_slopes_for_8_heads_are_halvings() -> None:
    assert torch.equal(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)]))


@pytest.mark.parametrize("n_heads, exponents", [
    (6, [2, 4, 6, 8, 1, 3]),
    (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),
])
def test_alibi_slopes_for_non_powers_of_two_follow_press(n_heads: int, exponents: list[float]) -> None:
    expected = torch.tensor([2.0 ** -e for e in exponents])
    assert_close(alibi_slopes(n_heads), expected, rtol=1e-6, atol=0)


@given(n_heads=st.integers(1, 40))
def test_alibi_slopes_match_the_official_code(n_heads: int) -> None:
    slopes = alibi_slopes(n_heads)
    assert slopes.shape == (n_heads,) and slopes.dtype == torch.float32
    assert_close(slopes.double(), torch.tensor(press_slopes(n_heads), dtype=torch.float64),
                 rtol=1e-6, atol=0)


@given(n_heads=st.integers(1, 6), n_q=st.integers(1, 6), n_k=st.integers(1, 6))
def test_alibi_bias_follows_p5(n_heads: int, n_q: int, n_k: int) -> None:
    bias = alibi_bias(n_heads, n_q, n_k)
    assert bias.shape == (n_heads, n_q, n_k) and bias.dtype == torch.float32
    distance = (torch.arange(n_q)[:, None] - torch.arange(n_k)).abs()
    assert_close(bias, -alibi_slopes(n_heads)[:, None, None] * distance)
    assert torch.equal(alibi_bias(n_heads, n_q), alibi_bias(n_heads, n_q, n_q))


@pytest.mark.parametrize("call, names", [
    (lambda: sinusoidal_encoding(4, 5), "d_model"),
    (lambda: shift_rotation(1, 5), "d_model"),
    (lambda: apply_rope(torch.zeros(2, 3)), r"\bx\b"),
    (lambda: alibi_slopes(0), "n_heads"),
], ids=["sinusoidal_encoding", "shift_rotation", "apply_rope", "alibi_slopes"])
def test_bad_arguments_raise_value_error_naming_them(call, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        call()
