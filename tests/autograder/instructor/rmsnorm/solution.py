"""rmsnorm.py: RMSNorm, a LayerNorm without the mean (docs/spec.md, "rmsnorm.py")."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    """RMSNorm(d_model, eps=1e-6): (R1) y = x / sqrt(mean(x**2 over the last axis) + eps) * weight, with
    `weight` a parameter of shape (d_model,) that starts at ones. Any leading dims; the input's dtype."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        # END SOLUTION
