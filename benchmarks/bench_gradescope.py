"""Gradescope at its defaults (issue 22, item 4): the bundle (`grader autograder`) run as Gradescope runs
it, on /autograder laid out in a temporary folder, inside a control group with Gradescope's default
limits: half a CPU (a CPU quota) and 768 MB of memory (swap included where the machine counts it).
Prints, for each run, the wall and CPU seconds of run_autograder (workers included), the group's peak
memory (what the 768 MB limit counts: resident memory and page cache), and the score results.json
gives: a run cut short by the memory limit shows as a lower score, or as no results at all. As root
(control groups).

    python benchmarks/bench_gradescope.py [SUBMISSION] [--repeat N] [--memory-mb 768] [--cpus 0.5]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from grader.sandbox.cgroup import Group  # noqa: E402
from helpers import autograder_root  # noqa: E402 - tests/helpers.py, as the Gradescope tests lay it out


def run(bundle: Path, submission: Path, memory_mb: int, cpus: float) -> str:
    """One run of run_autograder in a group of Gradescope's limits: a line of figures."""
    group = Group.create(memory_mb << 20, 4096, cpus)
    if group is None:
        sys.exit("no control group can be made here (run as root)")
    with tempfile.TemporaryDirectory() as scratch:
        root = autograder_root(bundle, Path(scratch), submission)
        env = {**os.environ, "AUTOGRADER_ROOT": str(root),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        start = time.monotonic()
        done = subprocess.run([*group.join_command(), "bash", str(root / "run_autograder")], cwd=root,
                              env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        cpu, peak = group.cpu_seconds(), group.memory_peak()
        group.remove()
        results = root / "results" / "results.json"
        score = json.loads(results.read_text())["score"] if results.is_file() else "no results.json"
    return (f"{wall:6.1f} s wall, {cpu or 0:5.1f} s CPU, peak memory {(peak or 0) / 2**20:5.0f} MiB, "
            f"score {score}, exit {done.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", nargs="?", default=str(ROOT / "solutions"))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--memory-mb", type=int, default=768, help="the memory limit (Gradescope's default)")
    parser.add_argument("--cpus", type=float, default=0.5, help="the CPU quota (Gradescope's default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        bundle = Path(scratch, "autograder.zip")
        subprocess.run([sys.executable, "-m", "grader.cli", "autograder", "--out", str(bundle)], check=True,
                       capture_output=True)
        print(f"{args.submission}, {args.cpus} CPU, {args.memory_mb} MB:")
        for _ in range(args.repeat):
            print("  " + run(bundle, Path(args.submission), args.memory_mb, args.cpus), flush=True)


if __name__ == "__main__":
    main()
