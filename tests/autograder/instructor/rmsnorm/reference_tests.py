"""rmsnorm.py: RMSNorm (R1) against its definition."""
import torch
from solutions.rmsnorm import RMSNorm


def test_rmsnorm_follows_r1() -> None:
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    norm = RMSNorm(5).double()
    torch.testing.assert_close(norm(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
