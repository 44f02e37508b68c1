"""How many of the bug corpus's non-crash bugs the public tests catch: each bug of
examples/submissions/bugs.py graded by `grader check --only <its component>` (public tests only);
a bug is caught when its own component loses points. Targets: at least 80% overall (issue 8), at
least 95% of each component's bugs (issue 21).

    python benchmarks/public_catch.py [COMPONENT ...] [--jobs N]
"""
import argparse
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from grader.instructor.corpus import load_bugs
from grader.judge import judge
from grader.spec import COMPONENTS

ROOT = Path(__file__).resolve().parents[1]


def public_loss(job: tuple[str, str, str]) -> tuple[str, str, float, list[str]]:
    """(bug, component, points lost in the component's public tests, names of the failing tests)."""
    name, component, submission = job
    results = judge(Path(submission), public_only=True, components=(component,))
    failing = [r.name for r in results if r.score < r.max_score]
    return name, component, sum(r.max_score - r.score for r in results), failing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("components", nargs="*", default=list(COMPONENTS), help="default: all")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    args = parser.parse_args()
    corpus = load_bugs()
    bugs = [b for b in corpus.BUGS if not b.crash and b.component in args.components]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="public-catch-") as tmp, ProcessPoolExecutor(args.jobs) as pool:
        jobs = [(b.name, b.component, str(corpus.materialize(b, tmp))) for b in bugs]
        outcomes = list(pool.map(public_loss, jobs))
    by_component: dict[str, list] = defaultdict(list)
    for outcome in outcomes:
        by_component[outcome[1]].append(outcome)
    print(f"{'component':<12} {'bugs':>4} {'caught':>6}  uncaught by the public tests")
    caught_all = 0
    for component in COMPONENTS:
        rows = by_component.get(component)
        if not rows:
            continue
        caught = [r for r in rows if r[2] > 0]
        caught_all += len(caught)
        uncaught = ", ".join(r[0] for r in rows if r[2] == 0) or "-"
        print(f"{component:<12} {len(rows):>4} {len(caught):>6}  {uncaught}")
    share = caught_all / len(outcomes) if outcomes else 0.0
    print(f"{'all':<12} {len(outcomes):>4} {caught_all:>6}  ({share:.0%}; {time.monotonic() - start:.0f} s)")
    for name, component, lost, failing in outcomes:
        if lost:
            print(f"  {name} ({component}): -{lost:g} in {', '.join(failing)}")


if __name__ == "__main__":
    main()
