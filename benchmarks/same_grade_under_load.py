"""The same grade under load (issue 16): `grader grade --only COMPONENTS` of the reference and a few
bugs, idle, with the machine oversubscribed N times (busy processes, each in its own session) and on
half a CPU (a cgroup quota, or taskset and a busy loop); prints, per submission and condition, the
score, the tests whose JSON differs from the idle run's, and the wall and CPU seconds the grading took.

    python benchmarks/same_grade_under_load.py [--only attention,block] [--factor 10]
                                               [--bugs softmax_over_queries no_scale hang]
"""
import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from grader.instructor.corpus import load_bugs  # noqa: E402
from load import busy_processes, cores, half_a_cpu  # noqa: E402 - tests/load.py, as the tests use it


def grade(submission: Path, only: str, prefix: list[str]) -> tuple[dict, float, float]:
    """The JSON of one grading, its wall seconds and the CPU seconds of its processes."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch, "card.json")
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        subprocess.run([*prefix, sys.executable, "-m", "grader.cli", "grade", str(submission),
                        "--json", str(out), "--only", only], check=True, capture_output=True)
        wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return json.loads(out.read_text()), wall, cpu


def differences(card: dict, idle: dict) -> list[str]:
    """The tests whose result differs from the idle run's: `name: status (idle: status)`."""
    before = {test["name"]: test for test in idle["tests"]}
    return [f"{test['name']}: {test['status']} (idle: {before[test['name']]['status']})"
            for test in card["tests"] if test != before[test["name"]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="attention,block")
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--bugs", nargs="*", default=["softmax_over_queries", "no_scale", "hang"])
    args = parser.parse_args()
    corpus = load_bugs()
    with tempfile.TemporaryDirectory() as scratch:
        submissions = {"reference": ROOT / "solutions"}
        submissions |= {name: corpus.materialize(corpus.BY_NAME[name], Path(scratch, name))
                        for name in args.bugs}
        idle = {name: grade(path, args.only, []) for name, path in submissions.items()}
        runs = {"idle": idle}
        with busy_processes(args.factor * cores()):
            runs[f"{args.factor}x"] = {name: grade(path, args.only, []) for name, path in submissions.items()}
        with half_a_cpu() as (prefix, how):
            runs["half a CPU"] = {name: grade(path, args.only, prefix) for name, path in submissions.items()}
    print(f"--only {args.only}; {cores()} cores; half a CPU: {how}")
    for name in submissions:
        for condition, graded in runs.items():
            card, wall, cpu = graded[name]
            diff = differences(card, idle[name][0])
            print(f"{name:<22} {condition:<11} score {card['score']:g}/{card['max_score']:g}  "
                  f"wall {wall:6.1f} s  cpu {cpu:5.1f} s  "
                  f"{'same JSON' if not diff else 'differs: ' + '; '.join(diff)}")


if __name__ == "__main__":
    main()
