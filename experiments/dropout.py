"""Study 3: dropout 0 / 0.1 / 0.3 on a small-data task.

A fixed, small training set is cycled for many epochs; a held-out set from the same task
measures generalisation. Reported: final train and held-out loss (both in eval mode, so
without dropout), their gap, and the cost in steps (first step at which held-out accuracy
reaches the target, and the step of the best held-out loss).
"""
import itertools
from pathlib import Path

from grader.tasks import Task

from .common import EVAL_SEED, Impl, build, evaluate, fit, fixed, fmt, mean_std, train_summary
from .report import Section, Table, figure, plt, split
from .runner import Run

VERSION = 1
TITLE = "Dropout on a small-data task"


def small_data(impl: Impl, *, rate: float, seed: int, task: str, length: int, n_symbols: int,
               train_examples: int, steps: int, every: int, lr: float, warmup: int, batch_size: int,
               eval_batches: int, target_accuracy: float, arch: dict) -> dict:
    """Train with dropout `rate` on train_examples fixed sequences; probe train/held-out loss."""
    train_set = fixed(task, length, n_symbols, batch_size, max(1, train_examples // batch_size), seed)
    held_out = fixed(task, length, n_symbols, batch_size, eval_batches, EVAL_SEED + seed)
    model = build(impl, Task(task, length, n_symbols).vocab_size, seed, dropout=rate, **arch)

    def probe(step: int) -> dict:
        tr, ho = evaluate(impl, model, train_set), evaluate(impl, model, held_out)
        return {"train_loss": tr["loss"], "train_accuracy": tr["accuracy"],
                "held_out_loss": ho["loss"], "held_out_accuracy": ho["accuracy"]}

    history = fit(impl, model, itertools.cycle(train_set), steps=steps, every=every, probe=probe,
                  max_lr=lr, warmup_steps=warmup)
    curve = history["curve"]
    best = min(curve, key=lambda p: p["held_out_loss"])
    reached = next((p["step"] for p in curve if p["held_out_accuracy"] >= target_accuracy), None)
    return {**train_summary(history), "curve": curve, "final": curve[-1],
            "best_held_out_step": best["step"], "best_held_out_loss": best["held_out_loss"],
            "steps_to_target": reached}


def runs(cfg: dict) -> list[Run]:
    keys = ("task", "length", "n_symbols", "train_examples", "steps", "every", "lr", "warmup",
            "batch_size", "eval_batches", "target_accuracy", "arch")
    return [Run("dropout", "small_data", {"rate": rate, "seed": seed, **{k: cfg[k] for k in keys}},
                label=f"dropout {rate:g} seed {seed}")
            for rate in cfg["rates"] for seed in range(cfg["seeds"])]


def section(cfg: dict, pairs: list, out: Path) -> Section:
    ok, skipped, errors = split(pairs)
    s = Section("dropout", TITLE, intro=__doc__.split("\n\n", 1)[1].replace("\n", " ") + (
        f" Task: **{cfg['task']}** (prompt length {cfg['length']}, {cfg['n_symbols']} symbols), "
        f"{cfg['train_examples']} training sequences, {cfg['steps']} steps of batch {cfg['batch_size']} "
        f"(about {cfg['steps'] * cfg['batch_size'] // max(1, cfg['train_examples'])} epochs), "
        f"lr {cfg['lr']}, {cfg['seeds']} seed(s); "
        "dropout on the embeddings, the attention weights and each sublayer output."),
        skipped=skipped, errors=errors)
    if not ok:
        return s
    by = {}
    for run, r in ok:
        by.setdefault(run.config["rate"], []).append(r)
        f = r["final"]
        s.rows.append({"rate": run.config["rate"], "seed": run.config["seed"], "train_loss": f["train_loss"],
                       "held_out_loss": f["held_out_loss"], "gap": f["held_out_loss"] - f["train_loss"],
                       "held_out_accuracy": f["held_out_accuracy"],
                       "best_held_out_loss": r["best_held_out_loss"],
                       "best_held_out_step": r["best_held_out_step"], "steps_to_target": r["steps_to_target"],
                       "seconds": r["seconds"]})

    def stat(rate: float, key: str) -> tuple[float, float]:
        return mean_std([row[key] for row in s.rows if row["rate"] == rate and row[key] is not None])

    target = cfg["target_accuracy"]
    rows = []
    for rate in sorted(by):
        n_reached = sum(row["steps_to_target"] is not None for row in s.rows if row["rate"] == rate)
        reached = fmt(*stat(rate, "steps_to_target"), digits=0) if n_reached else "not reached"
        rows.append([f"{rate:g}", fmt(*stat(rate, "train_loss"), digits=3),
                     fmt(*stat(rate, "held_out_loss"), digits=3), fmt(*stat(rate, "gap"), digits=3),
                     fmt(*stat(rate, "held_out_accuracy"), digits=3),
                     f"{reached} ({n_reached}/{len(by[rate])})",
                     fmt(*stat(rate, "best_held_out_step"), digits=0)])
    s.tables.append(Table(f"At the end of training (mean ± std over seeds); steps to reach held-out accuracy "
                          f"{target} (seeds that reached it)",
                          ["dropout", "train loss", "held-out loss", "gap", "held-out acc",
                           f"steps to acc {target}", "step of best held-out loss"], rows))
    s.data = {"by_rate": {f"{rate:g}": {k: stat(rate, k) for k in ("train_loss", "held_out_loss", "gap",
                                                                     "held_out_accuracy", "steps_to_target")}
                          for rate in by}}
    s.findings = [f"Dropout {rate:g}: train loss {stat(rate, 'train_loss')[0]:.3f}, held-out "
                  f"{stat(rate, 'held_out_loss')[0]:.3f}, gap {stat(rate, 'gap')[0]:.3f}, held-out accuracy "
                  f"{stat(rate, 'held_out_accuracy')[0]:.3f}." for rate in sorted(by)]
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8))
    for i, rate in enumerate(sorted(by)):
        curve = by[rate][0]["curve"]  # seed 0's curves (the table averages all seeds)
        steps = [p["step"] for p in curve]
        axes[0].plot(steps, [p["train_loss"] for p in curve], ls="--", color=f"C{i}")
        axes[0].plot(steps, [p["held_out_loss"] for p in curve], color=f"C{i}", label=f"dropout {rate:g}")
        axes[1].plot(steps, [p["held_out_accuracy"] for p in curve], color=f"C{i}", label=f"dropout {rate:g}")
    axes[0].set(xlabel="step", ylabel="loss (dashed: train, solid: held-out)", yscale="log")
    axes[1].set(xlabel="step", ylabel="held-out accuracy")
    axes[1].axhline(target, color="grey", lw=0.8, ls=":")
    axes[1].legend(fontsize=7)
    s.figures.append((figure(out, "dropout_curves.png", fig),
                      "Train vs held-out loss and held-out accuracy (seed 0)."))
    return s
