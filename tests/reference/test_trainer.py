"""trainer.py: lr_schedule (T1), param_groups (T2), train (T3) and evaluate."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from grader.spec import IGNORE_INDEX
from grader.tasks import Task
from helpers import assert_close
from solutions.model import TinyTransformerLM
from solutions.trainer import evaluate, lr_schedule, param_groups, train

MAX_LR, MIN_LR = 1e-2, 1e-4
TASK = Task("reverse", length=4, n_symbols=5)


def schedule(step: int, warmup: int = 10, total: int = 110, min_lr: float = MIN_LR) -> float:
    return lr_schedule(step, max_lr=MAX_LR, warmup_steps=warmup, total_steps=total, min_lr=min_lr)


def fresh_model(seed: int = 0, **kwargs) -> TinyTransformerLM:
    torch.manual_seed(seed)
    return TinyTransformerLM(TASK.vocab_size, d_model=8, n_heads=2, n_layers=1, d_ff=16, **kwargs).double()


def batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    stream = TASK.batches(4, seed)
    return [next(stream) for _ in range(n)]


@pytest.mark.parametrize("step, expected", [
    (0, MAX_LR / 10),                  # warmup starts above zero: step 0 already trains
    (9, MAX_LR),                       # the last warmup step reaches max_lr
    (10, MAX_LR),                      # the first decay step: cosine at p = 0
    (60, (MAX_LR + MIN_LR) / 2),       # halfway through the decay
    (110, MIN_LR),                     # total_steps: the end of the cosine
    (500, MIN_LR),                     # past total_steps: p is clamped to 1
])
def test_lr_schedule_key_steps(step: int, expected: float) -> None:
    assert schedule(step) == pytest.approx(expected, rel=1e-12)


def test_lr_schedule_without_warmup_starts_at_max_lr() -> None:
    assert schedule(0, warmup=0) == pytest.approx(MAX_LR)
    assert schedule(50, warmup=0, total=100, min_lr=0.0) == pytest.approx(MAX_LR / 2)


@given(warmup=st.integers(0, 20), decay=st.integers(0, 50), min_lr=st.sampled_from([0.0, MIN_LR]))
def test_lr_schedule_rises_then_falls_within_bounds(warmup: int, decay: int, min_lr: float) -> None:
    total = warmup + decay
    lrs = [schedule(s, warmup, total, min_lr) for s in range(total + 5)]
    assert all(min_lr - 1e-15 <= lr <= MAX_LR + 1e-15 for lr in lrs)
    assert lrs[:warmup] == sorted(lrs[:warmup])
    assert lrs[warmup:] == sorted(lrs[warmup:], reverse=True)
    for step in range(warmup):
        assert lrs[step] == pytest.approx(MAX_LR * (step + 1) / warmup)


@pytest.mark.parametrize("pos_encoding, norm", [("learned", "pre"), ("rope", "post")])
def test_param_groups_put_each_parameter_once_by_ndim(pos_encoding: str, norm: str) -> None:
    model = fresh_model(pos_encoding=pos_encoding, norm=norm)
    decay, no_decay = param_groups(model, weight_decay=0.3)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.3, 0.0)
    grouped = [id(p) for p in decay["params"]] + [id(p) for p in no_decay["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters())
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    torch.optim.AdamW(param_groups(model, 0.3))  # usable as given


def reference_train(model: nn.Module, data: list, *, steps: int, warmup_steps: int, grad_clip: float,
                    weight_decay: float, betas: tuple[float, float]) -> None:
    """(T3) spelled out with torch's AdamW and clip_grad_norm_."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": other, "weight_decay": 0.0}], betas=betas)
    for step, (x, y) in enumerate(data[:steps]):
        for group in optimizer.param_groups:
            group["lr"] = lr_schedule(step, max_lr=MAX_LR, warmup_steps=warmup_steps, total_steps=steps)
        optimizer.zero_grad()
        F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX).backward()
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()


def test_train_matches_the_spelled_out_loop() -> None:
    """Same parameters after 4 steps with warmup, clipping, weight decay and custom betas."""
    model, data = fresh_model(), batches(4)
    expected = copy.deepcopy(model)
    options = {"steps": 4, "warmup_steps": 2, "grad_clip": 0.05, "weight_decay": 0.3, "betas": (0.8, 0.9)}
    history = train(model, data, max_lr=MAX_LR, **options)
    reference_train(expected, data, **options)
    assert min(history["grad_norm"]) > 0.05  # clipping was active on every step
    for p, q in zip(model.parameters(), expected.parameters(), strict=True):
        assert_close(p, q, rtol=1e-7, atol=1e-9)


def test_train_history_has_one_entry_per_step_and_the_schedule() -> None:
    history = train(fresh_model(), batches(5), steps=5, max_lr=MAX_LR, warmup_steps=2)
    assert set(history) == {"loss", "lr", "grad_norm"}
    assert all(len(values) == 5 and all(isinstance(v, float) for v in values) for values in history.values())
    assert history["lr"] == pytest.approx([lr_schedule(s, max_lr=MAX_LR, warmup_steps=2, total_steps=5)
                                           for s in range(5)])


def test_train_stops_when_batches_run_out() -> None:
    history = train(fresh_model(), iter(batches(3)), steps=10, max_lr=MAX_LR)
    assert all(len(values) == 3 for values in history.values())


def test_train_logs_loss_and_grad_norm_before_clipping() -> None:
    model, data = fresh_model(), batches(1)
    probe = copy.deepcopy(model)
    loss = F.cross_entropy(probe(data[0][0]).flatten(0, 1), data[0][1].flatten(), ignore_index=IGNORE_INDEX)
    loss.backward()
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in probe.parameters()]))
    history = train(model, data, steps=1, max_lr=MAX_LR, grad_clip=1e-3)
    assert history["loss"][0] == pytest.approx(loss.item(), rel=1e-9)
    assert history["grad_norm"][0] == pytest.approx(norm.item(), rel=1e-9)
    assert norm > 1e-3  # the clipped norm would have been 1e-3


def test_train_leaves_the_model_in_eval_mode() -> None:
    model = fresh_model(dropout=0.1)
    train(model, batches(2), steps=2, max_lr=MAX_LR)
    assert not any(module.training for module in model.modules())


class Lookup(nn.Module):
    """logits = table[token]; records the mode and grad state it was called in."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table)
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self.calls.append((self.training, torch.is_grad_enabled()))
        return self.table[idx]


def test_evaluate_counts_each_scored_position_once() -> None:
    """A batch with 5 scored positions and one with 1: the pooled mean, not the mean of means."""
    model = Lookup(torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64))
    x1, y1 = torch.tensor([[0, 1, 2], [0, 1, 2]]), torch.tensor([[0, 1, 0], [0, 2, IGNORE_INDEX]])
    x2, y2 = torch.tensor([[2, 2, 1]]), torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 0]])
    scored_logits = torch.cat([model.table[x1][y1 != IGNORE_INDEX], model.table[x2][y2 != IGNORE_INDEX]])
    scored_targets = torch.cat([y1[y1 != IGNORE_INDEX], y2[y2 != IGNORE_INDEX]])
    result = evaluate(model.train(), [(x1, y1), (x2, y2)])
    assert result["loss"] == pytest.approx(F.cross_entropy(scored_logits, scored_targets).item())
    assert result["accuracy"] == pytest.approx(3 / 6)
    assert model.calls == [(False, False), (False, False)]  # eval mode, no grad


def test_evaluate_scores_a_perfect_model_as_accurate() -> None:
    model = Lookup(10.0 * torch.eye(3, dtype=torch.float64))
    x = torch.tensor([[0, 1, 2, 1]])
    y = torch.tensor([[IGNORE_INDEX, 1, 2, IGNORE_INDEX]])
    result = evaluate(model, [(x, y)])
    assert result["accuracy"] == 1.0
    assert result["loss"] == pytest.approx(-math.log(math.exp(10) / (math.exp(10) + 2)))
