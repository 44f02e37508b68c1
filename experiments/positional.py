"""Study 1: positional encodings (sinusoidal, learned, RoPE, ALiBi, none).

Train on prompts of every length in [L/2, L], test at L (in distribution) and beyond, up to
2L (length generalisation, ALiBi's "train short, test long"). "learned" gets max_len covering
2L, so it runs there, but its rows past the training lengths were never trained (marked †).
"""
import torch

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
    stream,
    train_summary,
    verdict,
)
from .plots import ENCODING_COLORS, band, legend_below, subplots
from .report import Output, Section, Table, split
from .runner import Run

VERSION = 1
TITLE = "Positional encodings and length generalisation"

WHY = {
    "reverse": "order matters: answer token j is prompt token L-1-j, so the model must know "
               "where each symbol sits",
    "majority": "order-free control: the most frequent symbol does not depend on positions",
    "induction": "a repeated random sequence: predicting the second copy needs 'the token after the "
                 "previous occurrence', a relative-position mechanism that works at any length",
    "copy": "order matters: answer token j is prompt token j",
}


def seq_len(task: str, length: int, n_symbols: int) -> int:
    """How many tokens the model sees for a prompt of this length."""
    return Task(task, length, n_symbols).batch(1, torch.Generator())[0].size(1)


def train_and_test(impl: Impl, *, task: str, n_symbols: int, encoding: str, seed: int,
                   train_lengths: list[int], test_lengths: list[int], steps: int, lr: float,
                   warmup: int, batch_size: int, eval_batches: int, arch: dict) -> dict:
    """Train one encoding on mixed lengths, evaluate at each test length."""
    vocab = Task(task, 1, n_symbols).vocab_size
    max_len = max(seq_len(task, n, n_symbols) for n in test_lengths)
    model = build(impl, vocab, seed, pos_encoding=encoding, max_len=max_len, **arch)
    history = fit(impl, model, stream(task, train_lengths, n_symbols, batch_size, seed),
                  steps=steps, max_lr=lr, warmup_steps=warmup)
    tests = {str(n): evaluate(impl, model,
                              fixed(task, n, n_symbols, batch_size, eval_batches, EVAL_SEED + seed))
             for n in test_lengths}
    return {**train_summary(history), "test": tests}


def runs(cfg: dict) -> list[Run]:
    L = cfg["train_length"]
    keys = ("test_lengths", "steps", "lr", "warmup", "batch_size", "eval_batches", "arch")
    common = {k: cfg[k] for k in keys}
    train_lengths = range(max(1, L // 2), L + 1)
    return [Run("positional", "train_and_test",
                {**t, "encoding": enc, "seed": seed, "train_lengths": list(train_lengths), **common},
                label=f"positional {t['task']} {enc} seed {seed}")
            for t in cfg["tasks"] for enc in cfg["encodings"] for seed in range(cfg["seeds"])]


def _plot(out: Output, cfg: dict, by: dict) -> str:
    tasks = [t["task"] for t in cfg["tasks"]]
    fig, axes = subplots(len(tasks), height=3.6, sharey=True)
    for ax, task in zip(axes[0], tasks, strict=True):
        for enc in cfg["encodings"]:
            if (task, enc) in by:
                band(ax, cfg["test_lengths"],
                     [[r["test"][str(n)]["accuracy"] for n in cfg["test_lengths"]] for r in by[task, enc]],
                     color=ENCODING_COLORS[enc], marker="o", label=enc)
        ax.axvline(cfg["train_length"], color="grey", lw=1, ls="--")
        ax.set(title=task, xlabel="prompt length (dashed: longest trained)", ylim=(0, 1.02),
               xticks=cfg["test_lengths"])
    axes[0][0].set_ylabel("answer-token accuracy")
    legend_below(fig, axes[0])
    return out.figure("positional_length.png", fig, "Accuracy against prompt length")


def section(cfg: dict, pairs: list, out: Output) -> Section:
    ok, skipped, errors = split(pairs)
    L = cfg["train_length"]
    s = Section("positional", TITLE, intro=(
        f"A {cfg['arch']['n_layers']}-layer, d_model={cfg['arch']['d_model']} model per encoding, trained "
        f"{cfg['steps']} steps (AdamW, lr {cfg['lr']}, {cfg['warmup']} warmup steps, "
        f"batch {cfg['batch_size']}) on "
        f"prompts of length {max(1, L // 2)}..{L}, evaluated on fresh prompts of length "
        f"{', '.join(map(str, cfg['test_lengths']))} ({cfg['seeds']} seed(s), mean ± std). Tasks: "
        + "; ".join(f"**{t['task']}** ({WHY.get(t['task'], '')})" for t in cfg["tasks"]) + "."
        "\n\nWhy \"none\" must fail on an order task: without positional information, attention is "
        "permutation-equivariant, so what a layer computes at a position depends on the *set* of tokens "
        "it sees, not their order. The only order signal left is the causal mask (a token can count how "
        "many tokens precede it), which the model must learn to turn into positions; on reverse that is "
        "slow and imperfect, while on majority it is not needed at all. "
        "† \"learned\" rows past the longest trained sequence are untrained embeddings. " + NOISE_RULE),
        skipped=skipped, errors=errors)
    if not ok:
        return s
    by = {}
    for run, result in ok:
        c = run.config
        by.setdefault((c["task"], c["encoding"]), []).append(result)
        s.rows.append({"task": c["task"], "encoding": c["encoding"], "seed": c["seed"],
                       "final_train_loss": result["final_loss"], "seconds": result["seconds"],
                       **{f"acc@{n}": v["accuracy"] for n, v in result["test"].items()},
                       **{f"loss@{n}": v["loss"] for n, v in result["test"].items()}})
    stats = {key: {n: {m: mean_std([r["test"][n][m] for r in results]) for m in ("accuracy", "loss")}
                   for n in results[0]["test"]} for key, results in by.items()}
    s.data = {"stats": {f"{t}/{e}": v for (t, e), v in stats.items()}}
    longest = str(max(cfg["test_lengths"]))
    header = ["task", "encoding", f"acc @ L={L}", f"loss @ L={L}", f"acc @ {longest}", f"loss @ {longest}"]
    rows = []
    for t in cfg["tasks"]:
        for enc in cfg["encodings"]:
            if (t["task"], enc) not in stats:
                rows.append([t["task"], enc, "skipped", "", "", ""])
                continue
            st = stats[t["task"], enc]
            dagger = "†" if enc == "learned" and int(longest) > L else ""
            rows.append([t["task"], enc, fmt(*st[str(L)]["accuracy"]), fmt(*st[str(L)]["loss"]),
                         fmt(*st[longest]["accuracy"]) + dagger, fmt(*st[longest]["loss"]) + dagger])
    s.tables.append(Table(f"Answer-token accuracy and loss at the longest trained length L={L} and at "
                          f"{longest}", header, rows))
    s.figures.append((_plot(out, cfg, by), "Answer-token accuracy against prompt length (trained up to the "
                      "dashed line): mean over seeds with a ±1 std band."))
    s.findings = _findings(cfg, by)
    return s


def _findings(cfg: dict, by: dict) -> list[str]:
    """Per task and length: the best encoding, the ones within noise of it, and where "none" stands."""
    L, longest = str(cfg["train_length"]), str(max(cfg["test_lengths"]))
    found = []
    for t in cfg["tasks"]:
        task = t["task"]
        here = {enc: results for (tk, enc), results in by.items() if tk == task}
        if not here:
            continue
        parts = []
        for n in dict.fromkeys([L, longest]):
            acc = {enc: [r["test"][n]["accuracy"] for r in results] for enc, results in here.items()}
            best = max(acc, key=lambda enc: mean_std(acc[enc])[0])
            verdicts = {enc: verdict(acc[enc], acc[best]) for enc in acc if enc != best}
            tied = [enc for enc, v in verdicts.items() if v == "within noise"]
            text = f"at {n}: best {best} ({fmt(*mean_std(acc[best]))})"
            if any(v.startswith("one seed") for v in verdicts.values()):
                text += " (one seed: differences not judged)"
            else:
                text += f", within noise of it: {', '.join(tied)}" if tied else ", ahead of all beyond noise"
            if "none" in acc and best != "none":
                text += f"; \"none\" {fmt(*mean_std(acc['none']))} ({verdict(acc['none'], acc[best])})"
            parts.append(text)
        found.append(f"{task}: " + "; ".join(parts) + ".")
    return found
