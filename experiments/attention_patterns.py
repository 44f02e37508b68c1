"""Study 4: attention patterns on a repeated random sequence, when an induction head forms, and
what it needs (an ablation).

Models of 1 and 2 layers learn the induction task ([prompt, prompt]: the second copy is
predictable only by looking back one period). Prompt lengths are drawn from L/2..L, so the
period varies: a head attending at a fixed offset (a positional shortcut that one layer with
absolute positions learns when the period is fixed) cannot solve it. Every `every` steps the
implementation's attention_maps on probe sequences of period L gives, per layer and head, the
entropy (X1), the previous-token score (X2) and the induction score (X3). An induction head
needs two layers (a previous-token head feeding a head that matches on it), so the 1-layer
model is the control.

The ablation tests that mechanism causally on each trained 2-layer model: a layer-1 head is
mean-ablated (its output, the input features of out_proj it owns, replaced by their mean over
the held-out set at each position, so the head carries no information about the sequence at
hand) and the best layer-2 induction score and the held-out accuracy are measured again. The
head ablated is the layer-1 head with the highest previous-token score, then as a control the
one with the lowest, then every layer-1 head at once.
"""
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from grader.tasks import Task

from .common import (
    EVAL_SEED,
    NOISE_RULE,
    Batch,
    Impl,
    build,
    change_verdict,
    evaluate,
    finite,
    fit,
    fixed,
    fmt,
    mean_std,
    stream,
    train_summary,
    verdict,
)
from .plots import LAYER_COLORS, band, legend_below, subplots
from .report import Output, Section, Table, prose, split
from .runner import Run

VERSION = 3
TITLE = "Attention patterns and induction heads"
SCORES = ("entropy", "previous", "induction")
ABLATIONS = {"none": "tab:gray", "top previous-token head": "tab:red", "control head": "tab:blue",
             "all layer-1 heads": "black"}


# ----------------------------------------------------------------------------- ablation

def head_means(model: nn.Module, out_proj: nn.Module, batches: list[Batch]) -> torch.Tensor:
    """The mean input of out_proj (the heads' outputs, side by side) at each position over batches:
    (T, d_model)."""
    seen = []
    hook = out_proj.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    model.eval()
    try:
        with torch.no_grad():
            for x, _ in batches:
                model(x)
    finally:
        hook.remove()
    return torch.cat(seen).mean(0)


@contextmanager
def mean_ablated(out_proj: nn.Module, heads: list[int], d_head: int, means: torch.Tensor) -> Iterator[None]:
    """Within the block, `heads` (which own features [h * d_head, (h + 1) * d_head) of out_proj's
    input, docs/spec.md) output their per-position means instead of what they compute."""
    def replace(module, args):
        features = args[0].clone()
        for h in heads:
            cols = slice(h * d_head, (h + 1) * d_head)
            features[..., cols] = means[: features.size(-2), cols]
        return (features, *args[1:])

    hook = out_proj.register_forward_pre_hook(replace)
    try:
        yield
    finally:
        hook.remove()


def ablation(impl: Impl, model: nn.Module, probe_x: torch.Tensor, held_out: list[Batch], period: int,
             n_heads: int) -> dict:
    """Best layer-2+ induction score and held-out accuracy with layer-1 heads mean-ablated, per condition."""
    a = impl.analysis
    previous = a.previous_token_score(a.attention_maps(model, probe_x)).mean(1)[0]  # layer 1, per head
    out_proj = model.blocks[0].attn.out_proj
    means = head_means(model, out_proj, held_out)
    d_head = means.size(-1) // n_heads
    heads = {"none": [], "top previous-token head": [int(previous.argmax())],
             "control head": [int(previous.argmin())], "all layer-1 heads": list(range(n_heads))}
    found = {}
    for condition, ablated in heads.items():
        with mean_ablated(out_proj, ablated, d_head, means):
            induction = a.induction_score(a.attention_maps(model, probe_x), period).mean(1)[1:]
            found[condition] = {"heads": [f"L1H{h + 1}" for h in ablated],
                                "previous": [float(previous[h]) for h in ablated],
                                "induction": float(induction.max()),
                                "accuracy": evaluate(impl, model, held_out)["accuracy"]}
    return found


# ----------------------------------------------------------------------------- one run

def induction_formation(impl: Impl, *, n_layers: int, seed: int, encoding: str, n_symbols: int,
                        length: int, steps: int, every: int, lr: float, warmup: int, batch_size: int,
                        probe_size: int, arch: dict) -> dict:
    """Train on the induction task; probe per-head attention scores and held-out accuracy; ablate."""
    task = Task("induction", length, n_symbols)
    probe_x = fixed("induction", length, n_symbols, probe_size, 1, EVAL_SEED + seed)[0][0]
    held_out = fixed("induction", length, n_symbols, batch_size, 4, EVAL_SEED + seed + 1)
    model = build(impl, task.vocab_size, seed, n_layers=n_layers, pos_encoding=encoding,
                  max_len=2 * length, **arch)
    a = impl.analysis

    def scores(maps) -> dict:  # maps (n_layers, B, n_heads, T, T) -> per (layer, head), mean over B
        return {"entropy": a.attention_entropy(maps).mean(1).tolist(),
                "previous": a.previous_token_score(maps).mean(1).tolist(),
                "induction": a.induction_score(maps, length).mean(1).tolist()}

    def probe(step: int) -> dict:
        return {**scores(a.attention_maps(model, probe_x)), **evaluate(impl, model, held_out)}

    lengths = range(max(2, length // 2), length + 1)
    history = fit(impl, model, stream("induction", lengths, n_symbols, batch_size, seed),
                  steps=steps, every=every, probe=probe, max_lr=lr, warmup_steps=warmup)
    final_maps = a.attention_maps(model, probe_x[:1])[:, 0]  # (n_layers, n_heads, T, T), one sequence
    result = {**train_summary(history), "curve": history["curve"], "maps": final_maps.tolist(),
              "tokens": probe_x[0].tolist()}
    if n_layers >= 2:
        result["ablation"] = ablation(impl, model, probe_x, held_out, length, arch["n_heads"])
    return result


def runs(cfg: dict) -> list[Run]:
    keys = ("encoding", "n_symbols", "length", "steps", "every", "lr", "warmup", "batch_size", "probe_size",
            "arch")
    return [Run("attention_patterns", "induction_formation",
                {"n_layers": n, "seed": seed, **{k: cfg[k] for k in keys}},
                label=f"attention {n} layer(s) seed {seed}")
            for n in cfg["layers"] for seed in range(cfg["seeds"])]


def formed_at(curve: list[dict], threshold: float) -> int | None:
    """First probed step at which some head's induction score reaches the threshold."""
    return next((p["step"] for p in curve if max(map(max, p["induction"])) >= threshold), None)


def best_head(scores: list[list[float]]) -> tuple[float, str]:
    """The highest per-head score and its head's name (L1H2: layer 1, head 2)."""
    value, layer, head = max((v, layer, h) for layer, row in enumerate(scores) for h, v in enumerate(row))
    return value, f"L{layer + 1}H{head + 1}"


# ----------------------------------------------------------------------------- report

def section(cfg: dict, pairs: list, out: Output) -> Section:
    ok, skipped, errors = split(pairs)
    th = cfg["threshold"]
    s = Section("attention_patterns", TITLE, intro=prose(__doc__) + (
        f" Setting: {cfg['encoding']} encoding, d_model {cfg['arch']['d_model']}, "
        f"{cfg['arch']['n_heads']} heads, prompts of {cfg['length']} random symbols out of "
        f"{cfg['n_symbols']}, {cfg['steps']} steps, lr {cfg['lr']}, {cfg['seeds']} seed(s). "
        f"An induction head counts as formed at the first probed step where some head "
        f"scores ≥ {th} (uniform attention over the keys would give about 1/i ≈ "
        f"{1 / (1.5 * cfg['length']):.2f}). ") + NOISE_RULE, skipped=skipped, errors=errors)
    if not ok:
        return s
    by = {}
    for run, r in ok:
        n, seed = run.config["n_layers"], run.config["seed"]
        by.setdefault(n, []).append(r)
        final = r["curve"][-1]
        (ind, ind_head), (prev, prev_head) = best_head(final["induction"]), best_head(final["previous"])
        s.rows.append({"n_layers": n, "seed": seed, "formed_at_step": formed_at(r["curve"], th),
                       "held_out_accuracy": final["accuracy"], "held_out_loss": final["loss"],
                       "max_induction": ind, "max_induction_head": ind_head,
                       "max_previous": prev, "max_previous_head": prev_head, "seconds": r["seconds"],
                       **{f"ablated {c}: {k}": v for c, res in r.get("ablation", {}).items()
                          for k, v in res.items() if k in ("induction", "accuracy")}})
    _formation(s, cfg, by)
    first = {n: results[0] for n, results in sorted(by.items())}
    per_head = [[n, f"L{layer + 1}H{head + 1}"] + [f"{r['curve'][-1][k][layer][head]:.2f}" for k in SCORES]
                for n, r in first.items() for layer in range(n)
                for head in range(len(r["curve"][-1]["entropy"][layer]))]
    s.tables.append(Table("Per-head scores at the end of training (first seed; head numbers are arbitrary, "
                          "so they are not averaged across seeds): entropy (nats), previous-token and "
                          "induction score", ["layers", "head"] + list(SCORES), per_head))
    s.data = {"per_head_final_first_seed": {n: {k: r["curve"][-1][k] for k in SCORES}
                                            for n, r in first.items()},
              "threshold": th}
    s.figures.append((_curves(out, by, th), "Best head's induction (solid) and previous-token (dashed) "
                      "scores, and held-out accuracy, during training: mean over seeds, ±1 std band."))
    ablated = [r["ablation"] for r in by.get(2, []) if "ablation" in r]
    if ablated:
        _ablation_part(s, ablated, out)
    for n, r in first.items():
        s.figures.append((_heatmaps(out, r, n, cfg["length"]),
                          f"Attention maps of the {n}-layer model after training, on one probe sequence "
                          "(first seed); ticks: the tokens."))
    return s


def _formation(s: Section, cfg: dict, by: dict) -> None:
    th = cfg["threshold"]

    def column(n: int, key: str) -> list:
        return [row[key] for row in s.rows if row["n_layers"] == n]

    def stat(n: int, key: str, digits: int = 2) -> str:
        return fmt(*mean_std(column(n, key)), digits=digits)

    rows = []
    for n in sorted(by):
        steps = [v for v in column(n, "formed_at_step") if v is not None]
        formed = fmt(*mean_std(steps), digits=0) if steps else "not formed"
        rows.append([n, f"{len(steps)}/{len(by[n])}", formed, stat(n, "held_out_accuracy", 3),
                     stat(n, "max_induction"), stat(n, "max_previous")])
        s.findings.append(f"{n} layer(s): a head reaches induction score {th} in {len(steps)} of "
                          f"{len(by[n])} seeds" + (f", at step {formed}." if steps else "."))
    s.tables.append(Table(f"Induction-head formation and the strongest heads at the end of training "
                          f"(mean ± std over {cfg['seeds']} seed(s))",
                          ["layers", f"seeds with a head ≥ {th}", "formed at step", "held-out acc",
                           "max induction score", "max previous-token score"], rows))
    if len(by) >= 2:
        small, big = min(by), max(by)
        names = {"held_out_accuracy": "held-out accuracy", "max_induction": "best induction score"}
        s.findings.append(f"{big} layers against {small}: " + ", ".join(
            f"{name} {stat(big, key)} vs {stat(small, key)} ({verdict(column(big, key), column(small, key))})"
            for key, name in names.items()) + ".")


def _ablation_part(s: Section, ablated: list[dict], out: Output) -> None:
    conditions = list(ablated[0])

    def values(condition: str, key: str) -> list[float]:
        return [a[condition][key] for a in ablated]

    def changed(condition: str, key: str, base: str = "none") -> str:
        deltas = [a[condition][key] - a[base][key] for a in ablated]
        return f"{fmt(*mean_std(deltas), digits=3)} ({change_verdict(deltas)})"

    def heads(condition: str) -> str:
        if len(ablated[0][condition]["heads"]) != 1:
            return "all" if ablated[0][condition]["heads"] else "—"
        return ", ".join(f"{a[condition]['heads'][0]} ({a[condition]['previous'][0]:.2f})" for a in ablated)

    rows = [["nothing" if c == "none" else c, heads(c)]
            + [x for key in ("induction", "accuracy")
               for x in (fmt(*mean_std(values(c, key)), digits=3), "—" if c == "none" else changed(c, key))]
            for c in conditions]
    s.tables.append(Table(
        f"Mean-ablating layer-1 heads of the trained 2-layer models ({len(ablated)} seed(s)): best layer-2 "
        "induction score and held-out accuracy (mean ± std), and their change per seed (after − before, "
        "mean ± std; up/down when it exceeds its spread, within noise otherwise). Heads ablated: one per "
        "seed, with its previous-token score",
        ["ablated", "heads (per seed)", "induction score", "change", "held-out acc", "change"], rows))
    for c in conditions[1:]:
        s.findings.append(f"Ablating {'' if c.startswith('all') else 'the '}{c}: induction score changes by "
                          f"{changed(c, 'induction')}, "
                          f"held-out accuracy by {changed(c, 'accuracy')}.")
    top, control = "top previous-token head", "control head"
    s.findings.append(f"Top previous-token head against the control head, per seed (top − control): "
                      f"induction score {changed(top, 'induction', control)}, held-out accuracy "
                      f"{changed(top, 'accuracy', control)}.")
    s.data["ablation"] = ablated
    fig, axes = subplots(2, height=3.8)
    for ax, key, label in ((axes[0][0], "induction", "best layer-2 induction score"),
                           (axes[0][1], "accuracy", "held-out accuracy")):
        for i, c in enumerate(conditions):
            mean, std = mean_std(values(c, key))
            ax.bar(i, mean, yerr=std if finite(std) else 0, color=ABLATIONS[c], alpha=0.35, capsize=4)
            ax.plot([i] * len(ablated), values(c, key), "o", color=ABLATIONS[c], ms=5)
        for seed in range(len(ablated)):  # one line per seed: the ablation's effect within one model
            ax.plot(range(len(conditions)), [values(c, key)[seed] for c in conditions], color="0.5", lw=0.8)
        ax.set(ylabel=label, ylim=(0, 1.02), xticks=range(len(conditions)),
               xticklabels=["nothing" if c == "none" else c.replace(" head", "\nhead") for c in conditions])
    title = "Mean-ablating layer-1 heads of the 2-layer model"
    s.figures.append((out.figure("attention_ablation.png", fig, title),
                      "Best layer-2 induction score and held-out accuracy with nothing ablated, the layer-1 "
                      "head of highest previous-token score, the one of lowest (control), and every layer-1 "
                      "head: bars mean ± std over seeds, dots and grey lines the seeds."))


def _heatmaps(out: Output, result: dict, n_layers: int, length: int) -> str:
    maps, tokens = result["maps"], [str(t) for t in result["tokens"]]
    n_heads = len(maps[0])
    final = result["curve"][-1]
    fig, axes = subplots(n_heads, n_layers, height=3.6, width=max(11.0, 3.2 * n_heads), sharex=True,
                         sharey=True)  # the token ticks on the outer panels only
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer][head]
            image = ax.imshow(maps[layer][head], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"L{layer + 1}H{head + 1}: prev {final['previous'][layer][head]:.2f}, "
                         f"ind {final['induction'][layer][head]:.2f}", fontsize=10)
            ax.axvline(length - 0.5, color="w", lw=0.8)
            ax.grid(False)
    axes[0][0].set_xticks(range(len(tokens)), tokens)
    axes[0][0].set_yticks(range(len(tokens)), tokens)
    for ax in (ax for row in axes for ax in row):
        ax.tick_params(labelsize=7)
        ax.tick_params(axis="x", labelrotation=90)
    for row in axes:
        row[0].set_ylabel("query token")
    for ax in axes[-1]:
        ax.set_xlabel("key token")
    fig.colorbar(image, ax=[ax for row in axes for ax in row], shrink=0.8, label="attention weight")
    return out.figure(f"attention_maps_{n_layers}layer.png", fig,
                      f"{n_layers}-layer model: each query (row) attends to keys (columns); white line: "
                      "start of the repeat")


def _curves(out: Output, by: dict, threshold: float) -> str:
    fig, axes = subplots(2, height=3.8)
    score_ax, acc_ax = axes[0]
    for n, results in sorted(by.items()):
        steps = [p["step"] for p in results[0]["curve"]]
        color = LAYER_COLORS.get(n, f"C{n}")
        band(score_ax, steps, [[max(map(max, p["induction"])) for p in r["curve"]] for r in results],
             color=color, label=f"{n} layer(s)")
        band(score_ax, steps, [[max(map(max, p["previous"])) for p in r["curve"]] for r in results],
             color=color, ls="--")
        band(acc_ax, steps, [[p["accuracy"] for p in r["curve"]] for r in results], color=color,
             label=f"{n} layer(s)")
    score_ax.axhline(threshold, color="grey", lw=1, ls=":", label=f"formation threshold {threshold}")
    score_ax.set(xlabel="step", ylabel="best head's score", ylim=(0, 1.02),
                 title="induction (solid) and previous-token (dashed) score")
    acc_ax.set(xlabel="step", ylabel="held-out accuracy", ylim=(0, 1.02),
               title="held-out accuracy (second copy)")
    legend_below(fig, [score_ax, acc_ax])
    return out.figure("attention_scores.png", fig, "Induction-head formation during training")
