"""Before any run: has the implementation written every part the chosen studies call?

Each probe calls the docs/spec.md API the way the studies do, on the smallest model and batch
(milliseconds). A stub's NotImplementedError there stops `grader experiments` at once, naming it as
the runs would ("model.TinyTransformerLM is not implemented yet (exercises/model.py)"), instead of
after minutes of runs that could only be skipped. Any other error is left to the runs to report.
"""
import torch
from torch import nn

from grader.tasks import Task

from .common import Impl, build, evaluate, fit, fixed
from .runner import describe

_TASK = ("copy", 4, 4)  # name, prompt length, symbols: the smallest batch a study trains on


def _tiny_model(impl: Impl) -> nn.Module:
    return build(impl, Task(*_TASK).vocab_size, 0, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=32)


def _model_and_trainer(impl: Impl) -> None:
    batches = fixed(*_TASK, batch_size=2, n_batches=1, seed=0)
    model = _tiny_model(impl)
    fit(impl, model, iter(batches), steps=1, max_lr=1e-3)
    evaluate(impl, model, batches)


def _analysis(impl: Impl) -> None:
    x = fixed(*_TASK, batch_size=1, n_batches=1, seed=0)[0][0]
    maps = impl.analysis.attention_maps(_tiny_model(impl), x)
    for score in (impl.analysis.attention_entropy, impl.analysis.previous_token_score):
        score(maps)
    impl.analysis.induction_score(maps, 2)


def _attention(impl: Impl) -> None:
    q = torch.zeros(1, 4, 8)
    impl.attention.scaled_dot_product_attention(q, q, q, impl.attention.causal_mask(4))


PROBES = {"positional": (_model_and_trainer,), "norms": (_model_and_trainer,),
          "dropout": (_model_and_trainer,), "attention_patterns": (_model_and_trainer, _analysis),
          "cost": (_model_and_trainer, _attention)}
"""What each study calls of the implementation."""


def missing(impl: Impl, studies: list[str]) -> dict[str, list[str]]:
    """For each study that cannot run yet, the parts it needs that are still stubs, one line each."""
    stubs: dict = {}  # probe -> its stub's line, or None when the probe went through (or hit a bug)
    for probe in dict.fromkeys(probe for study in studies for probe in PROBES[study]):
        try:
            probe(impl)
        except NotImplementedError as error:
            outcome = describe(error, impl)
            stubs[probe] = outcome["message"] if outcome["status"] == "skipped" else None
        except Exception:  # noqa: BLE001 - a bug, not a stub: the runs report it where it happens
            stubs[probe] = None
        else:
            stubs[probe] = None
    found = {study: list(dict.fromkeys(filter(None, (stubs[probe] for probe in PROBES[study]))))
             for study in studies}
    return {study: lines for study, lines in found.items() if lines}
