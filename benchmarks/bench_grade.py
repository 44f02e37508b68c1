"""Wall time of grading on this machine: `grader grade` on the reference, per component, and
`grader check` on the reference and on the stubs. Targets (2 cores): grade <= 30 s, check <= 15 s.

    python benchmarks/bench_grade.py [--repeat N]
"""
import argparse
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from grader.judge import judge

ROOT = Path(__file__).resolve().parents[1]


def per_component(submission: Path) -> dict[str, float]:
    """Seconds spent in each component's cases (worker start-up counts toward the first)."""
    seconds: dict[str, float] = defaultdict(float)
    last = time.monotonic()

    def clock(result) -> None:
        nonlocal last
        now = time.monotonic()
        seconds[result.component] += now - last
        last = now

    judge(submission, on_result=clock)
    return dict(seconds)


def command_seconds(*args: str) -> float:
    """Wall time of one `grader` command, process start-up included."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "grader.cli", *args], check=True, capture_output=True)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command (the best is shown)")
    args = parser.parse_args()
    for component, seconds in per_component(ROOT / "solutions").items():
        print(f"  {component:<12} {seconds:6.1f} s")
    commands = {
        "grader grade solutions": ("grade", str(ROOT / "solutions")),
        "grader check solutions": ("check", str(ROOT / "solutions")),
        "grader check exercises": ("check", str(ROOT / "exercises")),
    }
    for label, command in commands.items():
        best = min(command_seconds(*command) for _ in range(args.repeat))
        print(f"{label:<26} {best:6.1f} s")


if __name__ == "__main__":
    main()
