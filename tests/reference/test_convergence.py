"""Convergence: with its recipe (grader.tasks.RECIPES), the tiny LM learns a synthetic task to
>= 99% held-out accuracy for every positional encoding and both norms."""
import pytest
import torch

from grader.spec import NORMS
from grader.tasks import RECIPES
from solutions.model import POS_ENCODINGS, TinyTransformerLM
from solutions.trainer import evaluate, train


def test_there_is_a_recipe_for_every_encoding() -> None:
    assert set(RECIPES) == set(POS_ENCODINGS)


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_tiny_lm_learns_its_recipe_task(pos_encoding: str, norm: str) -> None:
    recipe = RECIPES[pos_encoding]
    torch.manual_seed(0)
    model = TinyTransformerLM(recipe.task.vocab_size, pos_encoding=pos_encoding, norm=norm,
                              **recipe.model_kwargs)
    history = train(model, recipe.task.batches(recipe.batch_size, seed=0), steps=recipe.steps,
                    max_lr=recipe.max_lr, warmup_steps=recipe.warmup_steps, weight_decay=recipe.weight_decay)
    assert len(history["loss"]) == recipe.steps
    accuracy = evaluate(model, recipe.held_out())["accuracy"]
    assert accuracy >= 0.99, f"{recipe.task}: held-out accuracy {accuracy:.3f}"
