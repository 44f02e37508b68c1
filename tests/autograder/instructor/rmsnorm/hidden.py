"""rmsnorm.py, hidden cases: RMSNorm (R1) against the reference."""
from hypothesis import given
from hypothesis import strategies as st

from ...spec import TOLERANCES, Visibility
from .. import Suite
from ..checks import expect_close
from ..public.rmsnorm import R1, RMS
from ..strategies import dtypes, randn, seeds
from .reference import ref

suite = Suite("rmsnorm", Visibility.HIDDEN)


@suite.case(2)
@given(d_model=st.integers(1, 16), seed=seeds, dtype=dtypes)
def rmsnorm_matches_reference(student, d_model, seed, dtype):
    """RMSNorm matches the reference on inputs of any scale"""
    x = randn(seed, 4, d_model, dtype=dtype) * 10.0 ** (seed % 5 - 2)
    expected = ref.rmsnorm.RMSNorm(d_model).to(dtype)(x)
    expect_close(student.call(RMS, d_model).to(dtype)(x), expected, f"RMSNorm({d_model})(x)",
                 hint=f"check {R1}", **TOLERANCES[dtype]._asdict())
