"""Shared fixtures, helpers and hypothesis strategies for the tests of solutions/.

Tensors are drawn from seeded torch generators (hypothesis draws the seed and the shapes), so
every run sees the same examples: the "lab" profile is derandomized and has no deadline.
"""
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from torch import nn

# Every tensor here is tiny: a second intra-op thread only adds synchronisation, and on a busy
# 2-core machine it makes runs several times slower (measured: test_model.py 50 s vs 21 s).
torch.set_num_threads(1)

settings.register_profile("lab", derandomize=True, database=None, deadline=None, max_examples=12,
                          print_blob=False)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """Import each test module under the "lab" profile, then put back the profile before.

    Hypothesis binds a test's settings when @given decorates it, at import. grader.suites loads
    its own profile when imported (by other tests here); a module that loads its own keeps it.
    """
    if not isinstance(collector, pytest.Module):
        return (yield)
    outer = settings.default
    settings.load_profile("lab")
    try:
        return (yield)
    finally:
        if settings.default is settings.get_profile("lab"):
            settings.register_profile("outer", outer)
            settings.load_profile("outer")


DTYPES = (torch.float32, torch.float64)
# float64 pins the formula; float32 only has to agree to rounding.
TOLERANCES = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.float64: {"rtol": 1e-9, "atol": 1e-10}}

# Strategies: small sizes keep each example cheap; composites combine them.
seeds = st.integers(0, 2**31 - 1)
sizes = st.integers(1, 5)
lengths = st.integers(2, 7)
batch_shapes = st.lists(st.integers(1, 3), max_size=2).map(tuple)


@st.composite
def head_shapes(draw: st.DrawFn, even_head: bool = False) -> tuple[int, int]:
    """(d_model, n_heads) with d_model divisible by n_heads; d_head even if asked (RoPE)."""
    n_heads = draw(st.integers(1, 4))
    d_head = draw(st.sampled_from([2, 4]) if even_head else st.integers(1, 4))
    return n_heads * d_head, n_heads


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


def assert_close(actual: torch.Tensor, expected: torch.Tensor, **tolerance: float) -> None:
    """Same shape and dtype, values within the dtype's tolerance unless one is given.

    (torch.testing.assert_close would do, but its first call imports sympy: seconds per run.)
    """
    tolerance = tolerance or TOLERANCES[expected.dtype]
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    error = (actual - expected).abs().nan_to_num(nan=float("inf"))
    allowed = tolerance["atol"] + tolerance["rtol"] * expected.abs()
    assert torch.equal(actual.isnan(), expected.isnan()) and (error <= allowed).all(), (
        f"max abs error {error.max().item():.3g} beyond atol={tolerance['atol']}, rtol={tolerance['rtol']}")


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64,
          requires_grad: bool = False) -> torch.Tensor:
    """A standard-normal tensor from its own generator (does not touch the global RNG)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=dtype).requires_grad_(requires_grad)


def random_mask(*shape: int, seed: int = 0) -> torch.Tensor:
    """A random boolean mask (True = allowed) with at least one allowed key per query row."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) < 0.6
    keep = torch.randint(shape[-1], shape[:-1], generator=generator)
    return mask | nn.functional.one_hot(keep, shape[-1]).bool()


def build(cls: type[nn.Module], *args, seed: int = 0, dtype: torch.dtype = torch.float64,
          **kwargs) -> nn.Module:
    """cls(*args, **kwargs) in eval mode, with every parameter perturbed away from its init.

    Perturbing LayerNorm gains and biases (1 and 0 at init) lets comparisons tell apart
    norm1 from norm2 and a missing bias from a zero one.
    """
    torch.manual_seed(seed)
    module = cls(*args, **kwargs).to(dtype)
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            p.add_(0.3 * randn(*p.shape, seed=seed + i, dtype=dtype))
    return module.eval()


def additive_mask(mask: torch.Tensor | None, bias: torch.Tensor | None,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor | None:
    """Our mask (True = allowed) and bias as one float bias, -inf where the mask is False:
    a float `attn_mask` as torch's attention functions add it to the scores."""
    if mask is None:
        return bias
    zeros = torch.zeros(mask.shape, dtype=dtype)
    return (zeros if bias is None else bias).masked_fill(~mask, float("-inf"))


def torch_attn_mask(mask: torch.Tensor | None, bias: torch.Tensor | None,
                    batch: int, n_heads: int) -> torch.Tensor | None:
    """Our (mask, bias) as an `attn_mask` for nn.MultiheadAttention, shaped (B * H, T, T).

    nn.MultiheadAttention reads a boolean mask the other way round (True = BLOCKED); with a
    bias, mask and bias go in together as one float mask.
    """
    combined = ~mask if bias is None and mask is not None else additive_mask(mask, bias)
    if combined is None:
        return None
    T = combined.shape[-1]
    return combined.expand(batch, n_heads, T, T).reshape(batch * n_heads, T, T)
