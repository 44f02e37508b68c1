"""The position-wise feed-forward network."""
import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("gelu", "relu")


class FeedForward(nn.Module):
    """(F1) fc2(dropout(act(fc1(x)))); act is the exact (erf) GELU or ReLU."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "gelu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not one of {ACTIVATIONS}")
        self.activation = activation
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.activation == "gelu":
            h = F.gelu(h)
        else:
            h = F.relu(h)
        return self.fc2(self.dropout(h))
