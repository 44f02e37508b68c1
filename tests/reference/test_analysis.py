"""analysis.py: entropy (X1), previous-token (X2) and induction (X3) scores on hand-built
attention weights, and attention_maps on a model."""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.suites.strategies import causal, randn
from helpers import assert_close, batch_shapes, seeds
from solutions.analysis import attention_entropy, attention_maps, induction_score, previous_token_score
from solutions.model import TinyTransformerLM


def one_hot_rows(targets: list[int]) -> torch.Tensor:
    """(n, n) weights where query i puts all its weight on key targets[i]."""
    return torch.nn.functional.one_hot(torch.tensor(targets), len(targets)).double()


def random_weights(*shape: int, seed: int) -> torch.Tensor:
    """Causal attention weights: each row a random distribution over keys 0..i."""
    return randn(seed, *shape).masked_fill(~causal(shape[-1]), float("-inf")).softmax(-1)


def test_entropy_of_uniform_rows_is_log_n_in_nats() -> None:
    assert_close(attention_entropy(torch.full((2, 5, 5), 0.2, dtype=torch.float64)),
                 torch.full((2,), math.log(5), dtype=torch.float64))


def test_entropy_of_one_hot_and_hand_built_rows() -> None:
    assert attention_entropy(one_hot_rows([0, 0, 1])).item() == 0.0
    # Rows [1/2, 1/4, 1/4, 0] (1.5 ln 2) and [1, 0, 0, 0] (0): zeros add nothing, not NaN.
    weights = torch.tensor([[0.5, 0.25, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert attention_entropy(weights).item() == pytest.approx(0.75 * math.log(2))


@given(leading=batch_shapes, n=st.integers(2, 6), seed=seeds)
def test_scores_match_their_formulas_on_random_weights(leading: tuple, n: int, seed: int) -> None:
    weights = random_weights(*leading, n, n, seed=seed)
    terms = -(weights * weights.log()).nan_to_num(0.0)  # 0 log 0 = 0
    assert_close(attention_entropy(weights), terms.sum(-1).mean(-1))
    previous = torch.stack([weights[..., i, i - 1] for i in range(1, n)], dim=-1).mean(-1)
    assert_close(previous_token_score(weights), previous)
    for period in range(1, n):
        stripe = torch.stack([weights[..., i, i - period + 1] for i in range(period, n)], dim=-1)
        assert_close(induction_score(weights, period), stripe.mean(-1))


def test_previous_token_head_scores_one_and_a_self_head_zero() -> None:
    assert previous_token_score(one_hot_rows([0, 0, 1, 2, 3])).item() == 1.0
    assert previous_token_score(torch.eye(5)).item() == 0.0


def test_induction_head_scores_one_on_its_stripe_only() -> None:
    """Period 3: query i >= 3 looks at i - 2, the token after the previous occurrence."""
    weights = one_hot_rows([0, 0, 0, 1, 2, 3])
    assert induction_score(weights, period=3).item() == 1.0
    assert induction_score(weights, period=2).item() == 0.0
    assert previous_token_score(weights).item() == pytest.approx(1 / 5)


@pytest.mark.parametrize("call", [
    lambda: previous_token_score(torch.ones(1, 1)),
    lambda: induction_score(torch.eye(4), period=0),
    lambda: induction_score(torch.eye(4), period=4),
], ids=["previous_token_one_query", "induction_period_0", "induction_period_n_q"])
def test_scores_reject_impossible_sizes(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_attention_maps_stack_every_layer_in_eval_mode_and_restore_the_mode() -> None:
    torch.manual_seed(0)
    model = TinyTransformerLM(6, d_model=8, n_heads=2, n_layers=3, d_ff=16, dropout=0.5).train()
    idx = torch.randint(6, (2, 5), generator=torch.Generator().manual_seed(0))
    maps = attention_maps(model, idx)
    assert maps.shape == (3, 2, 2, 5, 5) and not maps.requires_grad
    assert model.training
    _, weights = model.eval()(idx, return_weights=True)
    assert_close(maps, torch.stack(weights).detach())
