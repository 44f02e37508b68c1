"""RMSNorm, written differently from the reference."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps)
        return self.weight * (x / rms)
