"""The position-wise feed-forward network."""
import torch
from torch import nn


class FeedForward(nn.Module):
    """(F1) forward(x) = fc2(dropout(act(fc1(x)))), applied to each position independently.

    Submodules fc1 = nn.Linear(d_model, d_ff), fc2 = nn.Linear(d_ff, d_model), dropout.
    activation: "gelu" (the exact, erf-based GELU: nn.GELU() with its default
    approximate="none") or "relu". Works on any leading dimensions.
    Raises ValueError for any other activation.
    Pitfall: the tanh approximation of GELU is close but not the same function.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "gelu"):
        super().__init__()
        # BEGIN SOLUTION
        activations = {"gelu": nn.GELU, "relu": nn.ReLU}
        if activation not in activations:
            raise ValueError(f"activation={activation!r} must be 'gelu' or 'relu'")
        self.fc1 = nn.Linear(d_model, d_ff)
        self.act = activations[activation]()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION
        return self.fc2(self.dropout(self.act(self.fc1(x))))
        # END SOLUTION
