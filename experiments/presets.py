"""The two presets: `quick` (a smoke run for CI: 43 runs, 11 CPU-seconds, 19 s with 2 workers on
the 2-core machine) and `full` (the documented results in docs/results.md: 236 runs).

The full preset's cost, from single runs measured on the 2-core machine (CPU seconds per run, one
thread): positional 3-5 (45 runs, ~3 min), norms grid 5 at depth 2 and 14 at depth 6 (72 runs,
~11 min), norms init 0.1-1.2 (72 runs, 35 s), dropout 28 (15 runs, ~7 min), attention patterns
11 and 17 (10 runs, ~2.3 min), cost ~20 s run alone: about 25 CPU-minutes, 13 minutes with 2
workers. `--seeds N` sets the seeds of every study; each seed of the norms grid costs about 4
CPU-minutes.

Each study reads its own dict; `seeds` is the number of seeds (runs use seeds 0..seeds-1).
"""
import copy

from grader.spec import MODEL_DEFAULTS, NORMS, POS_ENCODINGS

TINY = {name: MODEL_DEFAULTS[name] for name in ("d_model", "n_heads", "n_layers", "d_ff")}
"""The module's tiny model, for the toy tasks."""

FULL = {
    "positional": {
        "encodings": list(POS_ENCODINGS),
        # reverse: order matters ("none" must fail); majority: order-free control;
        # induction: a relative-position mechanism, the natural length-generalisation test.
        "tasks": [{"task": "reverse", "n_symbols": 10}, {"task": "majority", "n_symbols": 10},
                  {"task": "induction", "n_symbols": 16}],
        "train_length": 8, "test_lengths": [4, 8, 12, 16],
        "steps": 500, "lr": 5e-3, "warmup": 50, "batch_size": 32, "eval_batches": 8,
        "arch": TINY, "seeds": 3,
    },
    "norms": {
        # deeper and wider than the lab's model, with Xavier's initialisation as well as PyTorch's:
        # closer to Xiong et al.'s setting (d_ff = 4 d_model)
        "init": {"inits": ["default", "xavier"], "widths": [128, 256], "depths": [6, 12, 18], "n_heads": 4,
                 "task": "sort", "length": 16, "n_symbols": 32, "batch_size": 32},
        "grid": {"depths": [2, 6], "lrs": [3e-3, 1e-2, 3e-2], "warmups": [0, 100],
                 "task": "sort", "length": 16, "n_symbols": 32, "steps": 300, "batch_size": 32,
                 "betas": [0.9, 0.98], "eval_batches": 4, "arch": {"d_model": 64, "n_heads": 4, "d_ff": 256}},
        "stall_fraction": 0.9, "seeds": 3,
    },
    "dropout": {
        "rates": [0.0, 0.1, 0.3], "task": "dyck", "length": 12, "n_symbols": 8,
        "train_examples": 256, "steps": 1500, "every": 50, "lr": 3e-3, "warmup": 50,
        "batch_size": 32, "eval_batches": 8, "target_accuracy": 0.9, "arch": TINY, "seeds": 5,
    },
    "attention_patterns": {
        "layers": [1, 2], "encoding": "sinusoidal", "n_symbols": 32, "length": 12,
        "steps": 1500, "every": 25, "lr": 3e-3, "warmup": 50, "batch_size": 32, "probe_size": 16,
        "threshold": 0.4, "arch": {"d_model": 64, "n_heads": 4, "d_ff": 256}, "seeds": 5,
    },
    "cost": {
        "variants": {"encodings": list(POS_ENCODINGS), "norms": list(NORMS),
                     "seq_len": 64, "batch_size": 32, "steps": 10, "repeats": 5, "arch": TINY},
        "attention": {"lengths": [64, 128, 256, 512, 1024, 2048], "dims": [16, 32, 64, 128, 256, 512, 1024],
                      "n_at": 512, "d_at": 64, "repeats": 7},
        "seeds": 1,
    },
}

QUICK = copy.deepcopy(FULL)
QUICK["positional"].update(tasks=[{"task": "reverse", "n_symbols": 10},
                                  {"task": "majority", "n_symbols": 10}],
                           train_length=4, test_lengths=[4, 8], steps=60, warmup=10, eval_batches=2, seeds=1)
QUICK["norms"]["init"].update(widths=[32], depths=[2, 4], length=8)
QUICK["norms"]["grid"].update(depths=[2], lrs=[1e-3, 1e-2], warmups=[0, 20], length=8, steps=40,
                              eval_batches=1)
QUICK["norms"].update(seeds=1)
QUICK["dropout"].update(length=6, train_examples=64, steps=60, every=20, eval_batches=2, seeds=1)
QUICK["attention_patterns"].update(length=6, steps=60, every=20, probe_size=4, seeds=1)
QUICK["cost"]["variants"].update(encodings=["sinusoidal", "rope", "alibi"], seq_len=32, steps=3, repeats=2)
QUICK["cost"]["attention"].update(lengths=[32, 64, 128, 256], dims=[16, 32, 64], n_at=128, repeats=3)

PRESETS = {"quick": QUICK, "full": FULL}


def preset(name: str, seeds: int | None = None) -> dict:
    """A copy of a preset, with every study's number of seeds overridden when `seeds` is given."""
    config = copy.deepcopy(PRESETS[name])
    if seeds is not None:
        for study in config.values():
            study["seeds"] = seeds
    return config
