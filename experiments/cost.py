"""Study 5: cost. Time per training step and tokens/s per variant (encoding x norm), and the
growth of attention with sequence length n and width d (quiz Q1: O(n^2 d)).

Timing runs run alone, one thread, after every other run. Attention is timed as the
implementation's scaled_dot_product_attention on (1, 1, n, d) inputs with its causal_mask
(median of repeats, no grad); the fitted log-log slope against n should approach 2 and
against d approach 1 once the n x n score matrix dominates fixed overheads.
"""
import math
import statistics
import time

import torch

from grader.tasks import Task

from .common import NOISE_RULE, Impl, build, finite, fit, fmt, mean_std, stream, verdict
from .plots import ENCODING_COLORS, legend_below, log_y, subplots
from .report import Output, Section, Table, prose, split
from .runner import Run

VERSION = {"step_time": 2, "attention_time": 1}
TITLE = "Cost: step time, throughput, and attention's O(n² d)"


def step_time(impl: Impl, *, encoding: str, norm: str, seq_len: int, batch_size: int, steps: int,
              repeats: int, arch: dict) -> dict:
    """Milliseconds per training step (one value per repeat of `steps` steps) and tokens per second."""
    task = Task("copy", seq_len // 2, 10)  # x has 2 * length tokens
    model = build(impl, task.vocab_size, 0, pos_encoding=encoding, norm=norm, max_len=seq_len, **arch)
    batches = stream("copy", [seq_len // 2], 10, batch_size, 0)
    fit(impl, model, batches, steps=2, max_lr=1e-3)  # warm-up: allocator, first-call overheads
    ms = [1000 * fit(impl, model, batches, steps=steps, max_lr=1e-3)["seconds"] / steps
          for _ in range(repeats)]
    return {"ms_per_step": ms, "tokens_per_s": 1000 * batch_size * seq_len / statistics.fmean(ms)}


def attention_time(impl: Impl, *, n: int, d: int, repeats: int) -> dict:
    """Median seconds of one causal scaled_dot_product_attention call on (1, 1, n, d)."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, d, generator=generator) for _ in range(3))
    mask = impl.attention.causal_mask(n)
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            start = time.perf_counter()
            impl.attention.scaled_dot_product_attention(q, k, v, mask)
            times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times[1:])}  # the first call pays one-off costs


def runs(cfg: dict) -> list[Run]:
    var, att = cfg["variants"], cfg["attention"]
    fixed_keys = ("seq_len", "batch_size", "steps", "repeats", "arch")
    out = [Run("cost", "step_time", {"encoding": e, "norm": nm, **{k: var[k] for k in fixed_keys}},
               label=f"cost step {e} {nm}", timing=True)
           for e in var["encodings"] for nm in var["norms"]]
    sizes = [(n, att["d_at"]) for n in att["lengths"]] + [(att["n_at"], d) for d in att["dims"]]
    out += [Run("cost", "attention_time", {"n": n, "d": d, "repeats": att["repeats"]},
                label=f"cost attention n {n} d {d}", timing=True)
            for n, d in dict.fromkeys(sizes)]
    return out


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x (the exponent of a power law)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def section(cfg: dict, pairs: list, out: Output) -> Section:
    ok, skipped, errors = split(pairs)
    var, att = cfg["variants"], cfg["attention"]
    s = Section("cost", TITLE, intro=prose(__doc__) + (
        f" Step time: d_model {var['arch']['d_model']}, {var['arch']['n_layers']} layers, "
        f"batch {var['batch_size']}, {var['seq_len']} tokens, one thread, after 2 warm-up steps: the mean "
        f"over {var['steps']} steps, repeated {var['repeats']} times (mean ± std over the repeats). "
        "Absolute times depend on the machine (and on what else runs on it); compare within a table. ")
        + NOISE_RULE, skipped=skipped, errors=errors)
    steps = [(r.config, res) for r, res in ok if r.fn == "step_time"]
    times = {(r.config["n"], r.config["d"]): res["seconds"] for r, res in ok if r.fn == "attention_time"}
    if steps:
        _steps_part(s, steps, out)
    by_n = sorted((n, t) for (n, d), t in times.items() if d == att["d_at"])
    by_d = sorted((d, t) for (n, d), t in times.items() if n == att["n_at"])
    if len(by_n) >= 2 and len(by_d) >= 2:
        _attention_part(s, att, times, by_n, by_d, out)
    return s


def _steps_part(s: Section, steps: list[tuple[dict, dict]], out: Output) -> None:
    s.tables.append(Table("Training step cost per variant", ["encoding", "norm", "ms / step", "tokens / s"],
                          [[c["encoding"], c["norm"], fmt(*mean_std(r["ms_per_step"]), digits=1),
                            f"{r['tokens_per_s']:,.0f}"] for c, r in steps]))
    ms = {(c["encoding"], c["norm"]): r["ms_per_step"] for c, r in steps}
    s.rows += [{"part": "step", "encoding": enc, "norm": norm, "ms_per_step": mean_std(v)[0],
                "ms_per_step_std": mean_std(v)[1], "tokens_per_s": r["tokens_per_s"]}
               for ((enc, norm), v), (_, r) in zip(ms.items(), steps, strict=True)]
    fastest = min(ms, key=lambda key: mean_std(ms[key])[0])
    slowest = max(ms, key=lambda key: mean_std(ms[key])[0])
    s.findings.append(f"Step time ranges from {fmt(*mean_std(ms[fastest]), digits=1)} ms "
                      f"({', '.join(fastest)}) to {fmt(*mean_std(ms[slowest]), digits=1)} ms "
                      f"({', '.join(slowest)}): slowest against fastest {verdict(ms[slowest], ms[fastest])}.")
    norms = list(dict.fromkeys(c["norm"] for c, _ in steps))
    encodings = list(dict.fromkeys(c["encoding"] for c, _ in steps))
    fig, axes = subplots(1, height=3.6)
    ax = axes[0][0]
    width = 0.8 / len(norms)
    for j, norm in enumerate(norms):
        for i, enc in enumerate(encodings):
            if (enc, norm) in ms:
                m, sd = mean_std(ms[enc, norm])
                ax.bar(i + (j - (len(norms) - 1) / 2) * width, m, width * 0.95, yerr=sd if finite(sd) else 0,
                       color=ENCODING_COLORS.get(enc, "tab:olive"), hatch="//" if norm == "post" else None,
                       edgecolor="white", capsize=3)
    ax.set(xticks=range(len(encodings)), xticklabels=encodings, ylabel="ms per training step",
           xlabel="positional encoding (left bar: " + ", right bar: ".join(f"{n}-norm" for n in norms)
           + "; hatched: post-norm)")
    s.figures.append((out.figure("cost_steps.png", fig, "Training step time per variant"),
                      "Milliseconds per training step per encoding and norm placement: mean ± std over "
                      "repeats (error bars)."))


def _attention_part(s: Section, att: dict, times: dict, by_n: list, by_d: list, out: Output) -> None:
    # fit the larger half of each scan, where the O(n^2 d) matmuls dominate fixed overheads
    top_n, top_d = by_n[len(by_n) // 2:], by_d[len(by_d) // 2:]
    sn, sd = slope(*zip(*top_n, strict=True)), slope(*zip(*top_d, strict=True))
    s.data = {"attention_seconds": {f"{n}/{d}": t for (n, d), t in times.items()},
              "slope_n": sn, "slope_d": sd}
    s.rows += [{"part": "attention", "n": n, "d": d, "seconds": t} for (n, d), t in sorted(times.items())]
    s.data["slope_n_all"] = sn_all = slope(*zip(*by_n, strict=True))
    s.findings.append(f"Attention time grows as n^{sn:.2f} in sequence length "
                      f"(n = {top_n[0][0]}..{top_n[-1][0]}, d = {att['d_at']}; "
                      f"n^{sn_all:.2f} over n = {by_n[0][0]}..{by_n[-1][0]}) and as "
                      f"d^{sd:.2f} in width (d = {top_d[0][0]}..{top_d[-1][0]}, n = {att['n_at']}): "
                      f"O(n² d) predicts 2 and 1.")
    s.tables.append(Table(f"Attention time (ms, median of {att['repeats']} calls) against sequence length n "
                          f"(d = {att['d_at']})", ["n"] + [str(n) for n, _ in by_n],
                          [["ms"] + [f"{1000 * t:.3f}" for _, t in by_n]]))
    fig, axes = subplots(2, height=3.6)
    for ax, pts, name, power in ((axes[0][0], by_n, "n", 2), (axes[0][1], by_d, "d", 1)):
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, [1000 * y for y in ys], marker="o", color="tab:blue", label="measured")
        ax.plot(xs, [1000 * ys[-1] * (x / xs[-1]) ** power for x in xs], ls=":", color="grey",
                label="∝ n² (left), ∝ d (right)")
        ax.set_xscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xticks([], minor=True)
        log_y(ax)
        ax.set(xlabel=name + (f" (d = {att['d_at']})" if name == "n" else f" (n = {att['n_at']})"),
               ylabel="ms per attention call")
    legend_below(fig, axes[0])
    s.figures.append((out.figure("cost_attention.png", fig, "Attention time against n and d"),
                      f"Attention time against n (d = {att['d_at']}) and against d (n = {att['n_at']}), "
                      "log-log, with the slopes O(n² d) predicts through the last point."))
