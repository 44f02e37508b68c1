# Generated from solutions/feedforward.py by `grader release-stubs` (stub 863cb057d40b): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
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
        raise NotImplementedError("FeedForward.__init__: your code here (see the docstring)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("FeedForward.forward: your code here (see the docstring)")
