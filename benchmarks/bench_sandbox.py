"""What the sandbox's confinement costs: `grader grade` on the reference in each confinement mode this
machine allows, and optionally at an earlier commit (`--baseline REF`, e.g. the last one before the
hardening), runs alternating in one invocation so that a load on the machine hits every side alike.
Also the start-up of one worker per mode (namespaces, mounts and uid before torch is imported).
Target: the hardened mode costs at most 1 s per submission more than the baseline.

    python benchmarks/bench_sandbox.py [--repeat N] [--baseline REF] [--modes root,plain]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.sandbox.client import Sandbox
from grader.sandbox.modes import MODE_VARIABLE, mode

ROOT = Path(__file__).resolve().parents[1]


def grade_seconds(env: dict[str, str], cwd: Path) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(ROOT / "solutions")], cwd=cwd, env=env,
                   check=True, capture_output=True)
    return time.monotonic() - start


def startup_seconds(confinement: str, repeat: int = 5) -> float:
    """Median time from a new Sandbox to a worker ready for calls (torch imported)."""
    times = []
    os.environ[MODE_VARIABLE] = confinement
    mode.cache_clear()
    try:
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as scratch:
                start = time.monotonic()
                box = Sandbox(ROOT / "solutions", Path(scratch))
                box.ready()
                times.append(time.monotonic() - start)
                box.close()
    finally:
        del os.environ[MODE_VARIABLE]
        mode.cache_clear()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="gradings per side (the median is shown)")
    parser.add_argument("--baseline", metavar="REF", help="also grade with the grader at this git commit")
    parser.add_argument("--modes", default=f"{mode()},plain",
                        help=f"confinement modes to compare (default: this machine's, {mode()}, and plain)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    sides = {f"mode {m}": ({**os.environ, MODE_VARIABLE: m}, ROOT) for m in modes}
    with tempfile.TemporaryDirectory() as folder:
        if args.baseline:
            tree = Path(folder) / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.baseline],
                           check=True, capture_output=True)
            sides[f"commit {args.baseline}"] = ({**os.environ, "PYTHONPATH": str(tree)}, tree)
        try:
            times: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(args.repeat):
                for side, (env, cwd) in sides.items():
                    times[side].append(grade_seconds(env, cwd))
        finally:
            if args.baseline:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                               check=True)
    print(f"grader grade solutions/, median of {args.repeat} alternating runs (wall seconds):")
    for side, values in times.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {side:<24} {statistics.median(values):6.2f}   runs: {runs}")
    print("one worker's start-up, median of 5 (seconds):")
    for m in modes:
        print(f"  mode {m:<19} {startup_seconds(m):6.2f}")


if __name__ == "__main__":
    main()
