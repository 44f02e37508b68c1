"""Study 2: pre- vs post-norm, with and without learning-rate warmup.

(a) Per-block gradient norms at initialisation, one forward/backward pass (Xiong et al. 2020:
post-norm's grow toward the output, pre-norm's do not), with PyTorch's default initialisation and
with Xavier's (the original Transformer's, closer to the paper's setting), for deeper and wider
models than the lab's. (b) A grid over depth x learning rate x warmup x seeds: final training
loss, and whether a run diverged (a non-finite loss) or stalled (final loss still above
stall_fraction x ln(n_symbols), the loss of guessing).
"""
import math

import torch.nn.functional as F

from grader.spec import IGNORE_INDEX, NORMS
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
    layer_grad_norms,
    mean_std,
    stream,
    thin,
    train_summary,
    verdict,
    xavier_init,
)
from .plots import NORM_COLORS, band, integer_x, legend_below, log_y, subplots
from .report import Output, Section, Table, prose, split
from .runner import Run

VERSION = {"init_grad_norms": 3, "train_grid_point": 1}  # per run function: bump one, rerun only it
TITLE = "Pre- vs post-norm, with and without warmup"
INITS = {"default": "PyTorch's default", "xavier": "Xavier-uniform"}


def init_grad_norms(impl: Impl, *, norm: str, init: str, n_layers: int, d_model: int, n_heads: int,
                    seed: int, task: str, length: int, n_symbols: int, batch_size: int) -> dict:
    """Per-block gradient norms of the loss at initialisation (one batch, one backward)."""
    t = Task(task, length, n_symbols)
    model = build(impl, t.vocab_size, seed, norm=norm, n_layers=n_layers, max_len=4 * length,
                  d_model=d_model, n_heads=n_heads, d_ff=4 * d_model)
    if init == "xavier":
        xavier_init(model)
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
               {"norm": norm, "init": how, "n_layers": depth, "d_model": width, "seed": seed,
                **{k: init[k] for k in ("n_heads", "task", "length", "n_symbols", "batch_size")}},
               label=f"norms init {how} {norm} d_model {width} depth {depth} seed {seed}")
           for how in init["inits"] for width in init["widths"] for depth in init["depths"]
           for norm in NORMS for seed in range(cfg["seeds"])]
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


LINE_STYLES = ("-", "--", ":", "-.")  # the second variable of a figure (depth, warmup), in preset order


def _trend(ratios: list[float]) -> str:
    """Whether last/first block gradient ratios (one per seed) say the gradients grow toward the
    output, shrink toward it, or neither beyond their spread."""
    mean, std = mean_std(ratios)
    if not math.isfinite(std):
        return "one seed, no spread"
    if mean - std > 1:
        return "grows toward the output"
    return "shrinks toward the output" if mean + std < 1 else "flat within noise"


def _init_part(s: Section, cfg: dict, init_runs: list, out: Output) -> None:
    init = cfg["init"]
    by = {}  # (init, width, depth, norm) -> [result per seed]
    for run, result in init_runs:
        c = run.config
        by.setdefault((c["init"], c["d_model"], c["n_layers"], c["norm"]), []).append(result)
        s.rows.append({"part": "init", "init": c["init"], "d_model": c["d_model"], "depth": c["n_layers"],
                       "norm": c["norm"], "seed": c["seed"], "loss": result["loss"],
                       **{m: " ".join(f"{g:.4g}" for g in result[m])
                          for m in ("layer_grad_norms", "ffn_grad_norms")}})

    def ffn(key, block: int) -> list[float]:
        return [r["ffn_grad_norms"][block] for r in by[key]]

    def ratios(key) -> list[float]:
        return [r["ffn_grad_norms"][-1] / r["ffn_grad_norms"][0] for r in by[key]]

    rows = [[*key, fmt(*mean_std(ffn(key, 0)), digits=3), fmt(*mean_std(ffn(key, -1)), digits=3),
             fmt(*mean_std(ratios(key))), _trend(ratios(key))] for key in sorted(by)]
    s.tables.append(Table(
        f"Gradient norm of the FFN weights (fc1 and fc2, what Xiong et al. plot) at initialisation, "
        f"block 1 and last block, and their ratio per seed (mean ± std over {cfg['seeds']} seed(s); "
        f"one batch of {init['batch_size']} {init['task']} sequences, {init['n_heads']} heads, "
        f"d_ff = 4 d_model). \"default\": {INITS['default']} initialisation; \"xavier\": every "
        f"linear weight {INITS['xavier']}, biases zero",
        ["init", "d_model", "depth", "norm", "block 1", "last block", "last / first", "trend"], rows))
    s.data["init_grad_norms"] = {"/".join(map(str, key)): {m: [r[m] for r in v]
                                                           for m in ("layer_grad_norms", "ffn_grad_norms")}
                                 for key, v in by.items()}
    deepest = max(init["depths"])
    for how in init["inits"]:
        for width in init["widths"]:
            keys = {norm: (how, width, deepest, norm) for norm in NORMS if (how, width, deepest, norm) in by}
            if len(keys) < 2:
                continue
            post_last, pre_last = ffn(keys["post"], -1), ffn(keys["pre"], -1)
            s.findings.append(
                f"{INITS[how]} initialisation, d_model {width}, {deepest} layers: last/first FFN gradient "
                + ", ".join(f"{norm}-norm {fmt(*mean_std(ratios(key)))} ({_trend(ratios(key))})"
                            for norm, key in keys.items())
                + f"; last block, post-norm against pre-norm: {fmt(*mean_std(post_last), digits=3)} vs "
                  f"{fmt(*mean_std(pre_last), digits=3)} ({verdict(post_last, pre_last)}).")
    fig, axes = subplots(len(init["widths"]), len(init["inits"]), height=3.4, sharey=True)
    for row, how in zip(axes, init["inits"], strict=True):
        for ax, width in zip(row, init["widths"], strict=True):
            for depth, ls in zip(init["depths"], LINE_STYLES, strict=False):
                for norm in NORMS:
                    key = (how, width, depth, norm)
                    if key in by:
                        band(ax, range(1, depth + 1), [r["ffn_grad_norms"] for r in by[key]],
                             color=NORM_COLORS[norm], ls=ls, marker="o", ms=3,
                             label=f"{norm}-norm, {depth} layers")
            ax.set(title=f"{INITS[how]} init, d_model {width}", xlabel="block (1 = next to the input)")
            log_y(ax)
            integer_x(ax)
        row[0].set_ylabel("FFN grad norm at init")
    legend_below(fig, [ax for row in axes for ax in row], ncols=len(NORMS) * len(init["depths"]) // 2)
    s.figures.append((out.figure("norms_init_grad.png", fig, "Gradient norms at initialisation"),
                      "Per-block gradient norm of the FFN weights at initialisation, mean over seeds with a "
                      "±1 std band; colour: norm placement, line style: depth."))


def _grid_part(s: Section, cfg: dict, grid_runs: list, out: Output) -> None:
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

    def losses(key) -> list[float]:
        return [r["final_loss"] for r, _ in by.get(key, [])]

    rows = [[d, f"{lr:g}", w, cell((d, lr, w, "pre")), cell((d, lr, w, "post")),
             verdict(losses((d, lr, w, "post")), losses((d, lr, w, "pre")))]
            for d in grid["depths"] for lr in grid["lrs"] for w in grid["warmups"]]
    s.tables.append(Table(f"Final training loss (mean ± std over {cfg['seeds']} seed(s); the loss of "
                          f"guessing is ln {grid['n_symbols']} = {math.log(grid['n_symbols']):.2f}; "
                          f"stalled: final loss ≥ {stall_loss:.2f}) after {grid['steps']} steps "
                          f"on {grid['task']} ({grid['length']} of {grid['n_symbols']} symbols), "
                          f"betas {tuple(grid['betas'])}; last column: post-norm's loss against pre-norm's",
                          ["depth", "lr", "warmup", "pre-norm", "post-norm", "post vs pre"], rows))
    s.data["grid"] = {f"{n}/{d}/{lr:g}/{w}": [{"final_loss": r["final_loss"], "status": st}
                                              for r, st in v]
                      for (d, lr, w, n), v in by.items()}
    s.findings += _grid_findings(grid, by)
    fig, axes = subplots(len(grid["depths"]), height=3.8, sharey=True)
    n_series = len(NORMS) * len(grid["warmups"])
    for ax, d in zip(axes[0], grid["depths"], strict=True):
        for i, (norm, (w, ls)) in enumerate((n, wl) for n in NORMS
                                            for wl in zip(grid["warmups"], LINE_STYLES, strict=False)):
            lrs = [lr for lr in grid["lrs"] if (d, lr, w, norm) in by]
            stats = [mean_std(losses((d, lr, w, norm))) for lr in lrs]
            dodge = 1.06 ** (i - (n_series - 1) / 2)  # side by side, so the error bars do not hide each other
            ax.errorbar([lr * dodge for lr in lrs], [m for m, _ in stats],
                        yerr=[sd if math.isfinite(sd) else 0 for _, sd in stats], color=NORM_COLORS[norm],
                        ls=ls, marker="o", capsize=3, label=f"{norm}-norm, warmup {w}")
        ax.axhline(stall_loss, color="grey", lw=1, ls=":", label="stall threshold")
        ax.set(title=f"{d} layers", xscale="log", xlabel="peak learning rate")
        log_y(ax)
        ax.set_xticks(grid["lrs"], [f"{lr:g}" for lr in grid["lrs"]])
        ax.set_xticks([], minor=True)
    axes[0][0].set_ylabel("final training loss")
    legend_below(fig, axes[0], ncols=n_series + 1)
    s.figures.append((out.figure("norms_grid.png", fig, "Final loss against peak learning rate"),
                      "Final training loss against peak learning rate, mean ± std over seeds (error bars; "
                      "points side by side at each rate); colour: norm placement, line style: warmup; "
                      "dotted: stall threshold."))


def _grid_findings(grid: dict, by: dict) -> list[str]:
    def failed(key) -> bool:  # most seeds diverged or stalled
        return key in by and 2 * sum(st != "ok" for _, st in by[key]) > len(by[key])

    def loss(key) -> str:
        return fmt(*mean_std([r["final_loss"] for r, _ in by[key]]))

    found = []
    no_warmup, warmups = min(grid["warmups"]), [w for w in grid["warmups"] if w > min(grid["warmups"])]
    for d in grid["depths"]:
        for lr in grid["lrs"]:
            post, pre = (d, lr, no_warmup, "post"), (d, lr, no_warmup, "pre")
            if failed(post) and pre in by and not failed(pre):
                rescued = [w for w in warmups if (d, lr, w, "post") in by and not failed((d, lr, w, "post"))]
                found.append(f"Depth {d}, lr {lr:g}: post-norm without warmup fails in most seeds "
                             f"(loss {loss(post)}), pre-norm does not ({loss(pre)}); "
                             + (f"warmup {rescued[0]} rescues post-norm "
                                f"({loss((d, lr, rescued[0], 'post'))})." if rescued
                                else "warmup does not rescue post-norm here."))
    failures = [k for k in by if failed(k)]
    if not found:
        found.append("No grid point where post-norm without warmup fails while pre-norm does not"
                     + (f"; failing points: "
                        f"{', '.join(f'{n} d{d} lr {lr:g} w{w}' for d, lr, w, n in failures)}."
                        if failures else "; no run failed at this scale."))
    def final(key) -> list[float]:
        return [r["final_loss"] for r, _ in by[key]]

    def compare(pairs: dict, what: str) -> str | None:
        """One finding on pairs {label: (key a, key b)} of grid points that both trained: where a's loss
        differs from b's beyond the spread."""
        pairs = {label: (a, b) for label, (a, b) in pairs.items()
                 if a in by and b in by and not failed(a) and not failed(b)}
        if not pairs:
            return None
        verdicts = {label: verdict(final(a), final(b)) for label, (a, b) in pairs.items()}
        if any(v.startswith("one seed") for v in verdicts.values()):
            return f"{what}: one seed per grid point, so differences are not judged."
        differ = [f"{label}: {v} ({loss(pairs[label][0])} vs {loss(pairs[label][1])})"
                  for label, v in verdicts.items() if v != "within noise"]
        return (f"{what}, at the {len(pairs)} points where both train: beyond the spread at {len(differ)}"
                + (": " + "; ".join(differ) + "." if differ else ", within noise everywhere."))

    points = [(d, lr, w) for d in grid["depths"] for lr in grid["lrs"] for w in grid["warmups"]]
    found.append(compare({f"depth {d}, lr {lr:g}, warmup {w}": ((d, lr, w, "post"), (d, lr, w, "pre"))
                          for d, lr, w in points}, "Post-norm's final loss against pre-norm's"))
    found.append(compare({f"{n}-norm, depth {d}, lr {lr:g}, warmup {w}":
                          ((d, lr, w, n), (d, lr, no_warmup, n))
                          for d, lr, w in points if w != no_warmup for n in NORMS},
                         f"Final loss with warmup against warmup {no_warmup}"))
    return [f for f in found if f]


def section(cfg: dict, pairs: list, out: Output) -> Section:
    ok, skipped, errors = split(pairs)
    s = Section("norms", TITLE, intro=prose(__doc__)
                + " Post-norm blocks normalise after each residual sum; pre-norm blocks keep an identity "
                  "path from input to output. Training: the implementation's train() (AdamW, grad clip 1.0, "
                  "linear warmup then cosine decay). " + NOISE_RULE,
                skipped=skipped, errors=errors)
    init_runs = [(r, res) for r, res in ok if r.fn == "init_grad_norms"]
    grid_runs = [(r, res) for r, res in ok if r.fn == "train_grid_point"]
    if init_runs:
        _init_part(s, cfg, init_runs, out)
    if grid_runs:
        _grid_part(s, cfg, grid_runs, out)
    return s
