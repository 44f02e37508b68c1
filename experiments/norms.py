"""Study 2: pre- vs post-norm, with and without learning-rate warmup.

(a) Per-layer gradient norms at initialisation, one forward/backward pass (Xiong et al. 2020:
post-norm's grow toward the output, pre-norm's stay flat). (b) A grid over depth x learning
rate x warmup x seeds: final training loss, and whether a run diverged (a non-finite loss) or
stalled (final loss still above stall_fraction x ln(n_symbols), the loss of guessing).
"""
import math
from pathlib import Path

import torch.nn.functional as F

from grader.spec import IGNORE_INDEX, NORMS
from grader.tasks import Task

from .common import (
    EVAL_SEED,
    Impl,
    build,
    evaluate,
    fit,
    fixed,
    fmt,
    layer_grad_norms,
    mean_std,
    stream,
    thin,
    train_summary,
)
from .report import Section, Table, figure, plt, split
from .runner import Run

VERSION = {"init_grad_norms": 2, "train_grid_point": 1}  # per run function: bump one, rerun only it
TITLE = "Pre- vs post-norm, with and without warmup"


def init_grad_norms(impl: Impl, *, norm: str, n_layers: int, seed: int, task: str, length: int,
                    n_symbols: int, batch_size: int, arch: dict) -> dict:
    """Per-block gradient norms of the loss at initialisation (one batch, one backward)."""
    t = Task(task, length, n_symbols)
    model = build(impl, t.vocab_size, seed, norm=norm, n_layers=n_layers, max_len=4 * length, **arch)
    x, y = fixed(task, length, n_symbols, batch_size, 1, seed)[0]
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX)
    loss.backward()
    # Xiong et al. plot the FFN weights' gradients; the whole block's is kept alongside.
    ffn = [math.hypot(float(b.ffn.fc1.weight.grad.norm()), float(b.ffn.fc2.weight.grad.norm()))
           for b in model.blocks]
    return {"layer_grad_norms": layer_grad_norms(model), "ffn_grad_norms": ffn, "loss": loss.item()}


def train_grid_point(impl: Impl, *, norm: str, n_layers: int, lr: float, warmup: int, seed: int,
                     task: str, length: int, n_symbols: int, steps: int, batch_size: int,
                     betas: list[float], eval_batches: int, arch: dict) -> dict:
    """One (norm, depth, lr, warmup, seed) training run."""
    t = Task(task, length, n_symbols)
    model = build(impl, t.vocab_size, seed, norm=norm, n_layers=n_layers, max_len=4 * length, **arch)
    history = fit(impl, model, stream(task, [length], n_symbols, batch_size, seed), steps=steps,
                  max_lr=lr, warmup_steps=warmup, betas=tuple(betas))
    held_out = evaluate(impl, model,
                        fixed(task, length, n_symbols, batch_size, eval_batches, EVAL_SEED + seed))
    return {**train_summary(history), "held_out": held_out, "grad_norm_curve": thin(history["grad_norm"])}


def runs(cfg: dict) -> list[Run]:
    init, grid = cfg["init"], cfg["grid"]
    out = [Run("norms", "init_grad_norms",
               {"norm": norm, "n_layers": depth, "seed": seed,
                **{k: init[k] for k in ("task", "length", "n_symbols", "batch_size", "arch")}},
               label=f"norms init {norm} depth {depth} seed {seed}")
           for depth in init["depths"] for norm in NORMS for seed in range(cfg["seeds"])]
    fixed_keys = ("task", "length", "n_symbols", "steps", "batch_size", "betas", "eval_batches", "arch")
    out += [Run("norms", "train_grid_point",
                {"norm": norm, "n_layers": depth, "lr": lr, "warmup": warmup, "seed": seed,
                 **{k: grid[k] for k in fixed_keys}},
                label=f"norms {norm} depth {depth} lr {lr:g} warmup {warmup} seed {seed}")
            for depth in grid["depths"] for lr in grid["lrs"] for warmup in grid["warmups"]
            for norm in NORMS for seed in range(cfg["seeds"])]
    return out


def status(result: dict, stall_loss: float) -> str:
    """ok, diverged (non-finite loss at some step) or stalled (never got below the stall loss)."""
    if result["diverged"] or not math.isfinite(result["final_loss"]):
        return "diverged"
    return "stalled" if result["final_loss"] >= stall_loss else "ok"


MEASURES = {"layer_grad_norms": "all parameters of the block", "ffn_grad_norms": "FFN weights (fc1, fc2)"}


def _init_part(s: Section, cfg: dict, init_runs: list, out: Path) -> None:
    by = {}
    for run, result in init_runs:
        c = run.config
        by.setdefault((c["n_layers"], c["norm"]), []).append(result)
        s.rows.append({"part": "init", "norm": c["norm"], "depth": c["n_layers"], "seed": c["seed"],
                       **{m: " ".join(f"{g:.4g}" for g in result[m]) for m in MEASURES}})
    # mean[measure][(depth, norm)]: the per-block curve averaged over seeds
    mean = {m: {k: [sum(col) / len(col) for col in zip(*(r[m] for r in v), strict=True)]
                for k, v in by.items()}
            for m in MEASURES}
    s.data["init_grad_norms"] = {m: {f"{norm}/{depth}": g for (depth, norm), g in curves.items()}
                                 for m, curves in mean.items()}
    rows = [[depth, norm] + [x for m in MEASURES
                             for x in (f"{mean[m][depth, norm][0]:.3g}", f"{mean[m][depth, norm][-1]:.3g}",
                                       f"{mean[m][depth, norm][-1] / mean[m][depth, norm][0]:.2f}")]
            for depth, norm in sorted(by)]
    s.tables.append(Table("Gradient norms at initialisation (mean over seeds), first and last block and "
                          "their ratio: of all the block's parameters, and of its FFN weights only "
                          "(what Xiong et al. plot)",
                          ["depth", "norm", "block 1", "last block", "last / first",
                           "FFN block 1", "FFN last block", "FFN last / first"], rows))
    deepest = max(d for d, _ in by)
    for m, what in MEASURES.items():
        ratios = {norm: mean[m][deepest, norm][-1] / mean[m][deepest, norm][0]
                  for norm in NORMS if (deepest, norm) in by}
        s.findings.append(f"At initialisation ({deepest} layers), gradient norm of {what}, "
                          f"last block / first block: "
                          + ", ".join(f"{norm}-norm {r:.2f}" for norm, r in ratios.items())
                          + " (a ratio above 1 grows toward the output).")
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8))
    for ax, (m, what) in zip(axes, MEASURES.items(), strict=True):
        for i, (depth, norm) in enumerate(sorted(by)):
            ax.plot(range(1, depth + 1), mean[m][depth, norm], marker="o", ms=3, color=f"C{i // 2}",
                    ls="-" if norm == "post" else "--", label=f"{norm}, {depth} layers")
        ax.set(title=what, xlabel="block (1 = next to the input)", ylabel="grad norm at init",
               yscale="log")
    axes[1].legend(fontsize=6)
    s.figures.append((figure(out, "norms_init_grad.png", fig),
                      "Per-block gradient norm at initialisation (solid: post-norm, dashed: pre-norm)."))


def _grid_part(s: Section, cfg: dict, grid_runs: list, out: Path) -> None:
    grid = cfg["grid"]
    stall_loss = cfg["stall_fraction"] * math.log(grid["n_symbols"])
    by = {}
    for run, result in grid_runs:
        c = run.config
        st = status(result, stall_loss)
        by.setdefault((c["n_layers"], c["lr"], c["warmup"], c["norm"]), []).append((result, st))
        s.rows.append({"part": "grid", "norm": c["norm"], "depth": c["n_layers"], "lr": c["lr"],
                       "warmup": c["warmup"], "seed": c["seed"], "final_loss": result["final_loss"],
                       "held_out_loss": result["held_out"]["loss"],
                       "held_out_accuracy": result["held_out"]["accuracy"],
                       "status": st, "seconds": result["seconds"]})

    def cell(key) -> str:
        if key not in by:
            return "skipped"
        results = by[key]
        bad = [st for _, st in results if st != "ok"]
        text = fmt(*mean_std([r["final_loss"] for r, _ in results]))
        if bad:
            text += f" ({len(bad)}/{len(results)} {'/'.join(sorted(set(bad)))})"
        return text

    rows = [[d, f"{lr:g}", w, cell((d, lr, w, "pre")), cell((d, lr, w, "post"))]
            for d in grid["depths"] for lr in grid["lrs"] for w in grid["warmups"]]
    s.tables.append(Table(f"Final training loss (mean ± std over seeds; the loss of guessing is "
                          f"ln {grid['n_symbols']} = {math.log(grid['n_symbols']):.2f}; "
                          f"stalled: final loss ≥ {stall_loss:.2f}) after {grid['steps']} steps "
                          f"on {grid['task']} ({grid['length']} of {grid['n_symbols']} symbols), "
                          f"betas {tuple(grid['betas'])}",
                          ["depth", "lr", "warmup", "pre-norm", "post-norm"], rows))
    s.data["grid"] = {f"{n}/{d}/{lr:g}/{w}": [{"final_loss": r["final_loss"], "status": st}
                                              for r, st in v]
                      for (d, lr, w, n), v in by.items()}
    s.findings += _grid_findings(grid, by)
    fig, axes = plt.subplots(1, len(grid["depths"]), figsize=(3.4 * len(grid["depths"]), 2.8),
                             squeeze=False)
    for ax, d in zip(axes[0], grid["depths"], strict=True):
        for norm in NORMS:
            for w in grid["warmups"]:
                lrs = [lr for lr in grid["lrs"] if (d, lr, w, norm) in by]
                losses = [mean_std([r["final_loss"] for r, _ in by[d, lr, w, norm]])[0] for lr in lrs]
                ax.plot(lrs, losses, marker="o", ls="-" if norm == "post" else "--",
                        label=f"{norm}, warmup {w}")
        ax.axhline(stall_loss, color="grey", lw=0.8, ls=":")
        ax.set(title=f"{d} layers", xscale="log", xlabel="peak learning rate", ylabel="final loss")
        ax.set_xticks(grid["lrs"], [f"{lr:g}" for lr in grid["lrs"]])
        ax.minorticks_off()
    axes[0][-1].legend(fontsize=6)
    s.figures.append((figure(out, "norms_grid.png", fig),
                      "Final loss against peak learning rate (dotted: stall threshold)."))


def _grid_findings(grid: dict, by: dict) -> list[str]:
    def failed(key) -> bool:  # most seeds diverged or stalled
        return key in by and 2 * sum(st != "ok" for _, st in by[key]) > len(by[key])

    found = []
    no_warmup, warmups = min(grid["warmups"]), [w for w in grid["warmups"] if w > min(grid["warmups"])]
    for d in grid["depths"]:
        for lr in grid["lrs"]:
            post, pre = (d, lr, no_warmup, "post"), (d, lr, no_warmup, "pre")
            if failed(post) and pre in by and not failed(pre):
                rescued = [w for w in warmups if (d, lr, w, "post") in by and not failed((d, lr, w, "post"))]
                found.append(f"Depth {d}, lr {lr:g}: post-norm without warmup fails "
                             f"(loss {mean_std([r['final_loss'] for r, _ in by[post]])[0]:.2f}), "
                             f"pre-norm does not ({mean_std([r['final_loss'] for r, _ in by[pre]])[0]:.2f}); "
                             + (f"warmup {rescued[0]} rescues post-norm." if rescued
                                else "warmup does not rescue post-norm here."))
    failures = [k for k in by if failed(k)]
    if not found:
        found.append("No grid point where post-norm without warmup fails while pre-norm does not"
                     + (f"; failing points: "
                        f"{', '.join(f'{n} d{d} lr {lr:g} w{w}' for d, lr, w, n in failures)}."
                        if failures else "; no run failed at this scale."))
    return found


def section(cfg: dict, pairs: list, out: Path) -> Section:
    ok, skipped, errors = split(pairs)
    s = Section("norms", TITLE, intro=__doc__.split("\n\n", 1)[1].replace("\n", " ")
                + " Post-norm blocks normalise after each residual sum; pre-norm blocks keep an identity "
                  "path from input to output. Training: the implementation's train() (AdamW, grad clip 1.0, "
                  "linear warmup then cosine decay).",
                skipped=skipped, errors=errors)
    init_runs = [(r, res) for r, res in ok if r.fn == "init_grad_norms"]
    grid_runs = [(r, res) for r, res in ok if r.fn == "train_grid_point"]
    if init_runs:
        _init_part(s, cfg, init_runs, out)
    if grid_runs:
        _grid_part(s, cfg, grid_runs, out)
    return s
