"""feedforward.py: FeedForward (F1) = fc2(dropout(act(fc1(x)))) on any leading dims."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from grader.suites.strategies import randn
from helpers import assert_close, batch_shapes, build, seeds, sizes
from solutions.feedforward import FeedForward

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}


@given(leading=batch_shapes, d_model=sizes, d_ff=sizes, seed=seeds,
       activation=st.sampled_from(sorted(ACTIVATIONS)))
def test_feedforward_follows_f1(leading: tuple, d_model: int, d_ff: int, seed: int, activation: str) -> None:
    ffn = build(FeedForward, d_model, d_ff, activation=activation, seed=seed)
    x = randn(seed, *leading, d_model)
    expected = F.linear(ACTIVATIONS[activation](F.linear(x, ffn.fc1.weight, ffn.fc1.bias)),
                        ffn.fc2.weight, ffn.fc2.bias)
    assert_close(ffn(x), expected)


def test_feedforward_gelu_is_exact_not_tanh(dtype: torch.dtype) -> None:
    """On [-4, 4] erf-GELU and tanh-GELU differ by up to 4e-4, far above rounding."""
    ffn = FeedForward(1, 1).to(dtype)
    with torch.no_grad():
        for layer in (ffn.fc1, ffn.fc2):
            layer.weight.fill_(1.0)
            layer.bias.zero_()
    x = torch.linspace(-4, 4, 17, dtype=dtype)[:, None]
    assert ffn(x).dtype == dtype
    assert_close(ffn(x), F.gelu(x))


def test_feedforward_submodules_and_shapes() -> None:
    ffn = FeedForward(6, 10, dropout=0.25)
    assert isinstance(ffn.fc1, nn.Linear) and isinstance(ffn.fc2, nn.Linear)
    assert (ffn.fc1.in_features, ffn.fc1.out_features) == (6, 10)
    assert (ffn.fc2.in_features, ffn.fc2.out_features) == (10, 6)
    assert isinstance(ffn.dropout, nn.Dropout) and ffn.dropout.p == 0.25


def test_feedforward_dropout_sits_between_activation_and_fc2() -> None:
    """Dropout(1.0) zeroes the hidden layer, leaving exactly fc2's bias."""
    ffn = build(FeedForward, 4, 8, dropout=1.0).train()
    y = ffn(randn(0, 3, 4))
    assert_close(y, ffn.fc2.bias.expand_as(y))


def test_feedforward_rejects_unknown_activation() -> None:
    with pytest.raises(ValueError, match="activation"):
        FeedForward(4, 8, activation="swish")
