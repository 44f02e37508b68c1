"""Study 3: dropout 0 / 0.1 / 0.3 on a small-data task.

A fixed, small training set is cycled for many epochs; a held-out set from the same task
measures generalisation. Reported: final train and held-out loss (both in eval mode, so
without dropout), their gap, and the cost in steps (first step at which held-out accuracy
reaches the target, and the step of the best held-out loss).
"""
import itertools

from grader.tasks import Task

from .common import (
    EVAL_SEED,
    NOISE_RULE,
    Impl,
    build,
    evaluate,
    fit,
    fixed,
    fmt,
    mean_std,
    train_summary,
    verdict,
)
from .plots import band, legend_below, log_y, rate_color, subplots
from .report import Output, Section, Table, prose, split
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


def section(cfg: dict, pairs: list, out: Output) -> Section:
    ok, skipped, errors = split(pairs)
    s = Section("dropout", TITLE, intro=prose(__doc__) + (
        f" Task: **{cfg['task']}** (prompt length {cfg['length']}, {cfg['n_symbols']} symbols), "
        f"{cfg['train_examples']} training sequences, {cfg['steps']} steps of batch {cfg['batch_size']} "
        f"(about {cfg['steps'] * cfg['batch_size'] // max(1, cfg['train_examples'])} epochs), "
        f"lr {cfg['lr']}, {cfg['seeds']} seed(s); "
        "dropout on the embeddings, the attention weights and each sublayer output. ") + NOISE_RULE,
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

    def values(rate: float, key: str) -> list:
        return [row[key] for row in s.rows if row["rate"] == rate]

    def stat(rate: float, key: str, digits: int = 3) -> str:
        text = fmt(*mean_std(values(rate, key)), digits=digits)
        return "not reached" if key == "steps_to_target" and text == "n/a" else text

    target = cfg["target_accuracy"]
    rates = sorted(by)
    rows = []
    for rate in rates:
        n_reached = sum(v is not None for v in values(rate, "steps_to_target"))
        rows.append([f"{rate:g}", stat(rate, "train_loss"), stat(rate, "held_out_loss"), stat(rate, "gap"),
                     stat(rate, "held_out_accuracy"),
                     f"{stat(rate, 'steps_to_target', 0)} ({n_reached}/{len(by[rate])})",
                     stat(rate, "best_held_out_step", 0)])
    s.tables.append(Table(f"At the end of training (mean ± std over seeds); steps to reach held-out accuracy "
                          f"{target} (seeds that reached it)",
                          ["dropout", "train loss", "held-out loss", "gap", "held-out acc",
                           f"steps to acc {target}", "step of best held-out loss"], rows))
    keys = ("train_loss", "held_out_loss", "gap", "held_out_accuracy", "steps_to_target")
    s.data = {"by_rate": {f"{rate:g}": {k: mean_std(values(rate, k)) for k in keys} for rate in rates}}
    base = rates[0]
    names = {"held_out_loss": ("held-out loss", 3), "gap": ("gap", 3),
             "held_out_accuracy": ("held-out accuracy", 3),
             "steps_to_target": (f"steps to accuracy {target}", 0)}
    for rate in rates[1:]:
        s.findings.append(f"Dropout {rate:g} against {base:g}: " + "; ".join(
            f"{name} {stat(rate, k, digits)} vs {stat(base, k, digits)} "
            f"({verdict(values(rate, k), values(base, k))})" for k, (name, digits) in names.items()) + ".")
    s.figures.append((_curves(out, by, target), "Train (dashed) and held-out (solid) loss in eval mode, and "
                      "held-out accuracy, during training: mean over seeds with a ±1 std band."))
    return s


def _curves(out: Output, by: dict, target: float) -> str:
    fig, axes = subplots(2, height=3.8)
    loss_ax, acc_ax = axes[0]
    rates = sorted(by)
    for rate in rates:
        color = rate_color(rate, rates)
        curves = [r["curve"] for r in by[rate]]
        steps = [p["step"] for p in curves[0]]
        band(loss_ax, steps, [[p["train_loss"] for p in c] for c in curves], color=color, ls="--")
        band(loss_ax, steps, [[p["held_out_loss"] for p in c] for c in curves], color=color,
             label=f"dropout {rate:g}")
        band(acc_ax, steps, [[p["held_out_accuracy"] for p in c] for c in curves], color=color,
             label=f"dropout {rate:g}")
    loss_ax.set(xlabel="step", ylabel="loss (eval mode)", title="train (dashed) and held-out loss")
    log_y(loss_ax)
    acc_ax.axhline(target, color="grey", lw=1, ls=":", label=f"accuracy {target}")
    acc_ax.set(xlabel="step", ylabel="held-out accuracy", title="held-out accuracy")
    legend_below(fig, [loss_ax, acc_ax])
    return out.figure("dropout_curves.png", fig, "Dropout on a small training set")
