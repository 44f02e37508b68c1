"""What the studies share: the implementation under test, seeded data, training and evaluation.

Only the docs/spec.md API of the implementation is used (TinyTransformerLM, train, evaluate, the
analysis functions, causal_mask, scaled_dot_product_attention), so any submission works.
"""
import hashlib
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from grader.sandbox.worker.loader import import_module, import_package
from grader.submission import MODULES
from grader.tasks import Task

Batch = tuple[torch.Tensor, torch.Tensor]
EVAL_SEED = 10_000  # held-out data never shares a generator seed with training data


def source_digest(directory: Path) -> str:
    """sha256 over the implementation's .py files: a changed submission invalidates cached runs."""
    h = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class Impl:
    """An implementation directory (solutions/, exercises/ or a submission) imported as a package."""

    def __init__(self, directory: Path):
        self.directory = Path(directory).resolve()
        self.digest = source_digest(self.directory)
        # one package per (folder, source): a copy elsewhere must not reuse cached submodules
        tag = hashlib.sha256(f"{self.directory}\0{self.digest}".encode()).hexdigest()[:12]
        self.package = import_package(self.directory, name=f"experiments_impl_{tag}")

    def __getattr__(self, module: str) -> ModuleType:
        """impl.model, impl.trainer, impl.analysis, ...: the implementation's own modules."""
        if module not in MODULES:
            raise AttributeError(module)
        return import_module(self.package, module)

    def where(self, filename: str) -> str:
        """A file of the implementation as the user would name it (relative to the cwd if inside)."""
        path = self.directory / filename
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)


# ----------------------------------------------------------------------------- data

def stream(name: str, lengths: Iterable[int], n_symbols: int, batch_size: int,
           seed: int) -> Iterator[Batch]:
    """Endless seeded batches of one task; each batch has a prompt length drawn from `lengths`."""
    tasks = [Task(name, length, n_symbols) for length in lengths]
    generator = torch.Generator().manual_seed(seed)
    while True:
        i = int(torch.randint(len(tasks), (1,), generator=generator))
        yield tasks[i].batch(batch_size, generator)


def fixed(name: str, length: int, n_symbols: int, batch_size: int, n_batches: int,
          seed: int) -> list[Batch]:
    """A fixed, seeded list of batches (a held-out set, or a small training set)."""
    return list(itertools.islice(stream(name, [length], n_symbols, batch_size, seed), n_batches))


# ----------------------------------------------------------------------------- models

def build(impl: Impl, vocab_size: int, seed: int, **arch) -> nn.Module:
    """impl's TinyTransformerLM with its parameters drawn from torch's generator seeded by `seed`."""
    torch.manual_seed(seed)  # also seeds dropout masks during training
    return impl.model.TinyTransformerLM(vocab_size, **arch)


def fit(impl: Impl, model: nn.Module, batches: Iterator[Batch], *, steps: int, every: int = 0,
        probe: Callable[[int], dict] | None = None, **train_kwargs) -> dict:
    """Train with impl's train(); calls probe(step) before every `every`-th step and at the end.

    The probe runs inside the batch stream, so one train() call (one optimiser, one lr
    schedule) yields a learning curve. A probe may leave the model in eval mode (SPEC's
    evaluate does): the stream switches it back to train mode before the step uses the batch.
    Returns train()'s history plus "curve" (the probes) and "seconds" (wall time of train()).
    """
    curve = []

    def probed() -> Iterator[Batch]:
        for step, batch in enumerate(batches):
            if probe is not None and every and step % every == 0:
                curve.append({"step": step, **probe(step)})
                model.train()
            yield batch

    start = time.perf_counter()
    history = impl.trainer.train(model, probed(), steps=steps, **train_kwargs)
    seconds = time.perf_counter() - start
    if probe is not None:
        curve.append({"step": steps, **probe(steps)})
    return {**history, "curve": curve, "seconds": seconds}


def evaluate(impl: Impl, model: nn.Module, batches: list[Batch]) -> dict:
    """impl's evaluate(): {"loss", "accuracy"} over the scored positions of `batches`."""
    return impl.trainer.evaluate(model, batches)


def xavier_init(model: nn.Module) -> nn.Module:
    """Redraw every nn.Linear weight Xavier-uniform with zero bias, as the original Transformer did
    (embeddings and LayerNorms keep the implementation's own initialisation)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model


def layer_grad_norms(model: nn.Module) -> list[float]:
    """The gradient norm of each block's parameters (after a backward pass)."""
    return [math.sqrt(sum(float(p.grad.pow(2).sum()) for p in block.parameters() if p.grad is not None))
            for block in model.blocks]


# ----------------------------------------------------------------------------- summaries

def tail(values: list[float], frac: float = 0.1) -> float:
    """Mean of the last `frac` of a curve (the final loss, less noisy than the last step)."""
    n = max(1, int(len(values) * frac))
    return sum(values[-n:]) / n


def finite(x: float) -> bool:
    return x is not None and math.isfinite(x)


def thin(values: list[float], points: int = 100) -> list[float]:
    """At most `points` evenly spaced values of a curve, for the stored results."""
    stride = max(1, math.ceil(len(values) / points))
    return values[::stride]


def train_summary(history: dict) -> dict:
    """What every training run keeps: final loss, divergence, time, and a thinned curve."""
    losses = history["loss"]
    steps = max(1, len(losses))
    return {
        "final_loss": tail(losses),
        "diverged": not all(map(math.isfinite, losses)),
        "seconds": history["seconds"],
        "ms_per_step": 1000 * history["seconds"] / steps,
        "loss_curve": thin(losses),
        "loss_curve_stride": max(1, math.ceil(len(losses) / 100)),
    }


def mean_std(values: list[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation of the finite values (over seeds); the std of a single
    value is NaN (undefined, not zero), and both are NaN when no value is finite."""
    values = [v for v in values if finite(v)]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else math.nan)


def fmt(mean: float, std: float | None = None, digits: int = 2) -> str:
    """'0.93 ± 0.02', '0.93' when there is no spread to give (one seed), 'n/a' when nothing finite
    was measured."""
    if not finite(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if not finite(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"


def verdict(a: list[float | None], b: list[float | None]) -> str:
    """How a compares with b over seeds: "higher", "lower", or "within noise" when the difference of
    the means does not exceed the sum of the two standard deviations (the mean ± std intervals
    overlap); "one seed, no spread" when either side has fewer than two finite values ("nothing to
    compare" when it has none)."""
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    if not (finite(ma) and finite(mb)):
        return "nothing to compare"
    if not (finite(sa) and finite(sb)):
        return "one seed, no spread"
    if abs(ma - mb) <= sa + sb:
        return "within noise"
    return "higher" if ma > mb else "lower"


def change_verdict(changes: list[float | None]) -> str:
    """How a paired change (after - before, one per seed) goes: "up" or "down" when its mean exceeds
    its standard deviation over seeds (mean ± std excludes 0), "within noise" otherwise."""
    mean, std = mean_std(changes)
    if not finite(std):
        return "one seed, no spread"
    return "within noise" if abs(mean) <= std else ("up" if mean > 0 else "down")


NOISE_RULE = ("A difference is called one only when the two means differ by more than the sum of "
              "their standard deviations (the mean ± std intervals do not overlap); otherwise it is "
              "\"within noise\".")
