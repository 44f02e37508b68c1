"""Wall time of grading on this machine: `grader grade` on the reference, per component, and the
student loop: `grader check` on the untouched stubs and `grader check --only attention` on the
reference. Targets (idle 2-core machine): grade <= 30 s, check on the stubs < 3 s, check of
attention < 6 s. CPU time (both processes) is shown too: on a machine that others load, it tells
what the wall time would be on an idle one better than the wall time does; and so does its ratio
to the CPU time of `python -c "import torch, numpy, hypothesis"` measured in the same round, just
before (issue 22's targets: grade <= 4x, check of the reference <= 3x): the median ratio over the
rounds, and their range. As root, a command's CPU time is read from a
control group of its own (its workers' groups nest in it): a worker killed in its PID namespace is
never waited for, so its CPU time is missing from getrusage's count of the children.

    python benchmarks/bench_grade.py [--repeat N] [--student-loop] [--against CHECKOUT]

`--against CHECKOUT` runs each command with another checkout of the grader too (PYTHONPATH), in the same
rounds, in alternating order: paired runs, so that a change's saving can be told from the machine's
drift (docs/performance.md: a mechanism stays only where paired runs show its saving above the noise).
"""
import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from grader.judge import judge
from grader.salt import SALT_VARIABLE
from grader.sandbox.cgroup import Group

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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cpu(command: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> float:
    """CPU seconds of a command and of every process it starts: those of a control group of its own
    where one can be made (root), else getrusage's count of the children waited for."""
    group = Group.create(1 << 40, 4096, float(os.cpu_count() or 1))
    cpu = _children_cpu()
    try:
        subprocess.run([*(group.join_command() if group else []), *command], check=True, capture_output=True,
                       env=env, cwd=cwd)
        used = group.cpu_seconds() if group else None
    finally:
        if group:
            group.remove()
    return _children_cpu() - cpu if used is None else used


def command_seconds(*args: str, checkout: Path | None = None) -> tuple[float, float]:
    """Wall and CPU time of one `grader` command (its workers included), process start-up included. A
    check runs as a student's does, with no GRADER_SALT in its environment (it needs none; with one, the
    judge would launch its sandbox's template rather than fork it: docs/grading.md, "Worker")."""
    env = {key: value for key, value in os.environ.items() if args[0] != "check" or key != SALT_VARIABLE}
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    start = time.monotonic()
    cpu = run_cpu([sys.executable, "-m", "grader.cli", *args], env, checkout or ROOT)  # -m: the cwd's grader
    return time.monotonic() - start, cpu


def import_cpu() -> float:
    """CPU seconds of importing what every grading imports: the unit of the ratios."""
    return run_cpu([sys.executable, "-c", "import torch, numpy, hypothesis"])


def compile_bytecode(root: Path) -> None:
    """Write the grader's and the reference's bytecode, as `pip install` does (the unit's modules have
    theirs): where PYTHONDONTWRITEBYTECODE is set, as on the development machine, every command would
    otherwise compile them again, about 0.1 CPU-s. The submissions themselves are compiled afresh in the
    worker either way."""
    for folder in ("grader", "solutions"):
        compileall.compile_dir(root / folder, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds: the import, then each command (the best times and the median ratio)")
    parser.add_argument("--student-loop", action="store_true", help="only the two `grader check` commands")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="also run each command with this checkout of the grader, alternating")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    if args.against:
        compile_bytecode(args.against)
    commands = {
        "grader check exercises": ("check", str(ROOT / "exercises")),
        "grader check --only attention solutions": ("check", str(ROOT / "solutions"), "--only", "attention"),
    }
    if not args.student_loop:
        for component, seconds in per_component(ROOT / "solutions").items():
            print(f"  {component:<12} {seconds:6.1f} s")
        commands = {"grader grade solutions": ("grade", str(ROOT / "solutions")),
                    "grader check solutions": ("check", str(ROOT / "solutions")), **commands}
    # Rounds: the import, then each command once, so that each ratio is to an import measured beside it
    # (this machine's speed drifts within minutes: a unit measured once, first, skews every ratio)
    units: list[float] = []
    runs: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    checkouts = {"": None, **({f" [{args.against.name}]": args.against} if args.against else {})}
    for round_number in range(args.repeat):
        units.append(import_cpu())
        for label, command in commands.items():
            order = list(checkouts.items())[::-1 if round_number % 2 else 1]
            for suffix, checkout in order:
                wall, cpu = command_seconds(*command, checkout=checkout)
                runs[label + suffix].append((wall, cpu, cpu / units[-1]))
    print(f"{'import torch, numpy, hypothesis':<42} {min(units):12.2f} s CPU (the unit; "
          f"{min(units):.2f} to {max(units):.2f} s over {len(units)} rounds)")
    for label, done in runs.items():
        walls, cpus, ratios = (sorted(column) for column in zip(*done, strict=True))
        print(f"{label:<42} {walls[0]:6.1f} s wall, {cpus[0]:5.1f} s CPU (best of {len(done)}) = "
              f"{statistics.median(ratios):4.1f}x the import (median; {ratios[0]:.1f}x to {ratios[-1]:.1f}x)")

if __name__ == "__main__":
    main()
