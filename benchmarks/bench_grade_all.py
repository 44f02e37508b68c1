"""Throughput of `grader grade-all` on one class, in one run: serial (--jobs 1), in parallel
(--jobs N), and on a Dask cluster of N single-thread workers on this machine (started first, not
timed). The class: copies of examples/submissions/correct and non-crash bugs of the corpus, in
turn. Target (issue 10): --jobs N at least 0.9 x N x the serial throughput. The CPU time of the
processes a local run starts, and the machine's load average after each run, say how loaded it
was (a Dask run's gradings are the workers' children: their CPU time is not counted here). Last,
the speed-up the machine itself gives N copies of a pure CPU loop: the ceiling of any parallel run.

    python benchmarks/bench_grade_all.py [--submissions 8] [--jobs 2] [--only COMPONENT]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.instructor.corpus import load_bugs

ROOT = Path(__file__).resolve().parents[1]


def make_class(folder: Path, count: int) -> None:
    """`count` submissions: correct/ and the corpus's non-crash bugs, alternately."""
    corpus = load_bugs()
    bugs = iter(bug for bug in corpus.BUGS if not bug.crash)
    for index in range(count):
        target = folder / f"student{index:03d}"
        if index % 2:
            shutil.move(corpus.materialize(next(bugs), folder / "bugs"), target)
        else:
            shutil.copytree(ROOT / "examples" / "submissions" / "correct", target)
    shutil.rmtree(folder / "bugs", ignore_errors=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grade_all(submissions: Path, out: Path, *options: str) -> tuple[float, float, float]:
    """Wall and CPU seconds of one `grader grade-all` (a fresh DIR: nothing to resume), and the
    load average after it."""
    start, cpu = time.monotonic(), _children_cpu()
    subprocess.run([sys.executable, "-m", "grader.cli", "grade-all", str(submissions), "--out", str(out),
                    *options], check=True, capture_output=True)
    return time.monotonic() - start, _children_cpu() - cpu, os.getloadavg()[0]


def machine_ceiling(jobs: int, repeat: int = 3) -> float:
    """The speed-up this machine gives `jobs` copies of a pure-Python CPU loop over one (median of
    `repeat`): about the most any parallel grading can reach here (virtual cores can share a
    physical one, and neighbours load it)."""
    loop = [sys.executable, "-c", "s = 0\nfor i in range(30_000_000): s += i"]
    ratios = []
    for _ in range(repeat):
        start = time.monotonic()
        subprocess.run(loop, check=True)
        one = time.monotonic() - start
        start = time.monotonic()
        for process in [subprocess.Popen(loop) for _ in range(jobs)]:
            process.wait()
        ratios.append(jobs * one / (time.monotonic() - start))
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=8, help="class size (at least 8 for the issue)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel gradings, and Dask workers")
    parser.add_argument("--only", metavar="A,B", help="grade only these components (faster, less telling)")
    args = parser.parse_args()
    options = ("--only", args.only) if args.only else ()
    from distributed import LocalCluster  # worker processes, as a real cluster's

    with tempfile.TemporaryDirectory(prefix="bench-grade-all-") as scratch:
        scratch = Path(scratch)
        make_class(scratch / "class", args.submissions)
        local = {"serial (--jobs 1)": ("serial", "--jobs", "1"),
                 f"local (--jobs {args.jobs})": ("local", "--jobs", str(args.jobs))}
        # The cluster exists only for its own run: its idle processes' heartbeats would take CPU
        # from the parallel run and not from the serial one, which leaves a core free.
        figures = {label: grade_all(scratch / "class", scratch / out, *how, *options)
                   for label, (out, *how) in local.items()}
        with LocalCluster(n_workers=args.jobs, threads_per_worker=1, dashboard_address=None) as cluster:
            figures[f"dask ({args.jobs} workers)"] = grade_all(
                scratch / "class", scratch / "dask", "--scheduler", cluster.scheduler_address, *options)
        same = {(scratch / out / "gradebook.csv").read_text() for out in ("serial", "local", "dask")}
    serial = figures["serial (--jobs 1)"][0]
    verdict = "identical" if len(same) == 1 else "DIFFERENT"
    print(f"{args.submissions} submissions{' (--only ' + args.only + ')' if args.only else ''}, "
          f"{os.cpu_count()} cores; the three gradebooks are {verdict}")
    print(f"{'run':<22} {'wall':>8} {'CPU':>8} {'per submission':>15} {'speed-up':>9} {'load after':>11}")
    for label, (wall, cpu, load) in figures.items():
        shown = "-" if label.startswith("dask") else f"{cpu:.1f}s"
        print(f"{label:<22} {wall:7.1f}s {shown:>8} {wall / args.submissions:14.1f}s {serial / wall:8.2f}x "
              f"{load:11.1f}")
    ceiling = machine_ceiling(args.jobs)
    local = serial / figures[f"local (--jobs {args.jobs})"][0]
    print(f"target: --jobs {args.jobs} at least {0.9 * args.jobs:.1f}x the serial throughput; this machine "
          f"gives {args.jobs} CPU loops {ceiling:.2f}x one, so --jobs {args.jobs} reaches "
          f"{local / ceiling:.0%} of what it can")


if __name__ == "__main__":
    main()
