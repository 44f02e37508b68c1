"""rmsnorm.py, public cases: RMSNorm (R1) against its definition, computed here."""
import torch
from hypothesis import given
from hypothesis import strategies as st

from ...spec import TOLERANCES, Visibility
from .. import Suite
from ..checks import expect, expect_close, expect_tensor
from ..strategies import dtypes, randn, seeds

suite = Suite("rmsnorm", Visibility.PUBLIC)
RMS = "rmsnorm.RMSNorm"
R1 = "(R1) y = x / sqrt(mean(x**2) + eps) * weight"


@suite.case(2)
@given(d_model=st.integers(1, 8), seed=seeds, dtype=dtypes)
def rmsnorm_follows_r1(student, d_model, seed, dtype):
    """RMSNorm(d_model)(x) follows (R1) over the last axis, in the input's dtype"""
    norm = student.call(RMS, d_model).to(dtype)
    x = randn(seed, 2, 3, d_model, dtype=dtype)
    what = f"RMSNorm({d_model})(x) with x of shape {tuple(x.shape)}"
    y = expect_tensor(norm(x), x.shape, what)
    expect(y.dtype == dtype, f"x is {dtype} but {what} is {y.dtype}")
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.state_dict()["weight"]
    expect_close(y, expected, what, hint=f"check {R1}", **TOLERANCES[dtype]._asdict())
