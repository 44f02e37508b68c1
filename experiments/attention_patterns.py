"""Study 4: attention patterns on a repeated random sequence, and when an induction head forms.

Models of 1 and 2 layers learn the induction task ([prompt, prompt]: the second copy is
predictable only by looking back one period). Prompt lengths are drawn from L/2..L, so the
period varies: a head attending at a fixed offset (a positional shortcut that one layer with
absolute positions learns when the period is fixed) cannot solve it. Every `every` steps the
implementation's attention_maps on probe sequences of period L gives, per layer and head, the
entropy (X1), the previous-token score (X2) and the induction score (X3). An induction head
needs two layers (a previous-token head feeding a head that matches on it), so the 1-layer
model is the control.
"""
from pathlib import Path

from grader.tasks import Task

from .common import EVAL_SEED, Impl, build, evaluate, fit, fixed, stream, train_summary
from .report import Section, Table, figure, plt, split
from .runner import Run

VERSION = 2
TITLE = "Attention patterns and induction heads"
SCORES = ("entropy", "previous", "induction")


def induction_formation(impl: Impl, *, n_layers: int, seed: int, encoding: str, n_symbols: int,
                        length: int, steps: int, every: int, lr: float, warmup: int, batch_size: int,
                        probe_size: int, arch: dict) -> dict:
    """Train on the induction task; probe per-head attention scores and held-out accuracy."""
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
    return {**train_summary(history), "curve": history["curve"], "maps": final_maps.tolist(),
            "tokens": probe_x[0].tolist()}


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


def _heatmaps(out: Path, result: dict, n_layers: int, length: int) -> str:
    maps = result["maps"]
    n_heads = len(maps[0])
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(1.9 * n_heads, 2.1 * n_layers + 0.4),
                             squeeze=False)
    final = result["curve"][-1]
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer][head]
            ax.imshow(maps[layer][head], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"L{layer + 1}H{head + 1} prev {final['previous'][layer][head]:.2f} "
                         f"ind {final['induction'][layer][head]:.2f}", fontsize=6)
            ax.axvline(length - 0.5, color="w", lw=0.4)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(f"{n_layers}-layer model, query (row) attends to key (column); "
                 "white line: start of the repeat", fontsize=7)
    return figure(out, f"attention_maps_{n_layers}layer.png", fig)


def section(cfg: dict, pairs: list, out: Path) -> Section:
    ok, skipped, errors = split(pairs)
    th = cfg["threshold"]
    s = Section("attention_patterns", TITLE, intro=__doc__.split("\n\n", 1)[1].replace("\n", " ") + (
        f" Setting: {cfg['encoding']} encoding, d_model {cfg['arch']['d_model']}, "
        f"{cfg['arch']['n_heads']} heads, prompts of {cfg['length']} random symbols out of "
        f"{cfg['n_symbols']}, {cfg['steps']} steps, lr {cfg['lr']}, {cfg['seeds']} seed(s). "
        f"An induction head counts as formed at the first probed step where some head "
        f"scores ≥ {th} (uniform attention over the keys would give about 1/i ≈ "
        f"{1 / (1.5 * cfg['length']):.2f})."), skipped=skipped, errors=errors)
    if not ok:
        return s
    rows, curves = [], {}
    for run, r in ok:
        n, seed = run.config["n_layers"], run.config["seed"]
        final = r["curve"][-1]
        step = formed_at(r["curve"], th)
        curves.setdefault(n, r)
        best_ind = max((v, layer, h) for layer, row in enumerate(final["induction"])
                       for h, v in enumerate(row))
        best_prev = max((v, layer, h) for layer, row in enumerate(final["previous"])
                        for h, v in enumerate(row))
        s.rows.append({"n_layers": n, "seed": seed, "formed_at_step": step,
                       "held_out_accuracy": final["accuracy"], "held_out_loss": final["loss"],
                       "max_induction": best_ind[0],
                       "max_induction_head": f"L{best_ind[1] + 1}H{best_ind[2] + 1}",
                       "max_previous": best_prev[0],
                       "max_previous_head": f"L{best_prev[1] + 1}H{best_prev[2] + 1}",
                       "seconds": r["seconds"]})
        rows.append([n, seed, "not formed" if step is None else step, f"{final['accuracy']:.3f}",
                     f"{best_ind[0]:.2f} (L{best_ind[1] + 1}H{best_ind[2] + 1})",
                     f"{best_prev[0]:.2f} (L{best_prev[1] + 1}H{best_prev[2] + 1})"])
        s.findings.append(f"{n} layer(s), seed {seed}: " + (
            f"an induction head (score ≥ {th}) appears at step {step}" if step is not None
            else f"no head reaches induction score {th}") + f"; at the end the best induction head is "
            f"L{best_ind[1] + 1}H{best_ind[2] + 1} ({best_ind[0]:.2f}), the best previous-token head "
            f"L{best_prev[1] + 1}H{best_prev[2] + 1} ({best_prev[0]:.2f}), "
            f"held-out accuracy {final['accuracy']:.3f}.")
    s.tables.append(Table("Induction-head formation and the strongest heads at the end of training",
                          ["layers", "seed", f"formed at step (score ≥ {th})", "held-out acc",
                           "max induction score (head)", "max previous-token score (head)"], rows))
    head_rows = []
    for n, r in sorted(curves.items()):
        final = r["curve"][-1]
        for layer, ent in enumerate(final["entropy"]):
            for head in range(len(ent)):
                head_rows.append([n, f"L{layer + 1}H{head + 1}"]
                                 + [f"{final[k][layer][head]:.2f}" for k in SCORES])
    s.tables.append(Table("Per-head scores at the end of training (first seed): entropy (nats), "
                          "previous-token and induction score", ["layers", "head"] + list(SCORES), head_rows))
    s.data = {"per_head_final": {n: {k: r["curve"][-1][k] for k in SCORES} for n, r in curves.items()},
              "threshold": th}
    for n, r in sorted(curves.items()):
        s.figures.append((_heatmaps(out, r, n, cfg["length"]),
                          f"Attention maps of the {n}-layer model after training "
                          "(one probe sequence, first seed)."))
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8))
    for i, (n, r) in enumerate(sorted(curves.items())):
        steps = [p["step"] for p in r["curve"]]
        axes[0].plot(steps, [max(map(max, p["induction"])) for p in r["curve"]], color=f"C{i}",
                     label=f"{n} layer(s): max induction")
        axes[0].plot(steps, [max(map(max, p["previous"])) for p in r["curve"]], color=f"C{i}", ls="--",
                     label=f"{n} layer(s): max previous-token")
        axes[1].plot(steps, [p["accuracy"] for p in r["curve"]], color=f"C{i}", label=f"{n} layer(s)")
    axes[0].axhline(th, color="grey", lw=0.8, ls=":")
    axes[0].set(xlabel="step", ylabel="best head's score")
    axes[0].legend(fontsize=6)
    axes[1].set(xlabel="step", ylabel="held-out accuracy (second copy)")
    axes[1].legend(fontsize=6)
    s.figures.append((figure(out, "attention_scores.png", fig),
                      "Best head's induction and previous-token scores, and accuracy, "
                      "during training (first seed)."))
    return s
