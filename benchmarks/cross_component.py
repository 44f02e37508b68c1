"""Points each bug of examples/submissions/bugs.py costs outside its own component (issue 8,
"one bug, one component"): every non-crash bug graded on every component, the points it loses
in other components split into integration cases (the student's whole stack, allowed) and the
rest (a component's own tests failing for another's bug), and whether a public test of its own
component catches it. Targets: at most 4 non-integration points per bug (issue 32: a dependency's
dropout left on in eval mode also fails the block's dropout tests), at most 10 integration points per bug.

    python benchmarks/cross_component.py [--jobs 2] [--json FILE] [BUG ...]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.instructor.corpus import load_bugs
from grader.spec import Status
from grader.suites import all_cases

ROOT = Path(__file__).resolve().parents[1]


def grade(submission: Path, scratch: Path) -> list[dict]:
    """`grader grade` in its own process (as graded for real); its tests as JSON."""
    out = scratch / f"{submission.name}.json"
    subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(submission), "--json", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    return json.loads(out.read_text())["tests"]


def losses(bug, tests: list[dict], cases: dict) -> dict:
    """Points lost by one bug: in its own component, and outside it by kind of case."""
    row = {"bug": bug.name, "component": bug.component, "own": 0.0, "integration": 0.0, "other": 0.0,
           "public_caught": False, "outside": {}}
    for test in tests:
        lost = test["max_score"] - test["score"]
        case = cases[test["component"], test["name"]]
        if test["component"] == bug.component:
            row["own"] += lost
            row["public_caught"] |= case.public and test["status"] != Status.PASSED
        elif lost:
            row["integration" if case.integration else "other"] += lost
            if not case.integration:
                row["outside"][f"{test['component']}.{test['name']}"] = lost
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bugs", nargs="*", help="bug names (default: every non-crash bug)")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    corpus = load_bugs()
    chosen = [bug for bug in corpus.BUGS if not bug.crash and (not args.bugs or bug.name in args.bugs)]
    cases = {(case.component, case.name): case for case in all_cases()}
    with tempfile.TemporaryDirectory(prefix="cross-") as scratch:
        scratch = Path(scratch)
        paths = [corpus.materialize(bug, scratch / "subs") for bug in chosen]
        with ThreadPoolExecutor(args.jobs) as pool:
            graded = list(pool.map(lambda path: grade(path, scratch), paths))
    rows = [losses(bug, tests, cases) for bug, tests in zip(chosen, graded, strict=True)]
    print(f"{'bug':<36} {'component':<12} {'own':>5} {'integ':>6} {'other':>6}  public  "
          "non-integration cases failed outside")
    for row in rows:
        where = ", ".join(f"{name} {lost:g}" for name, lost in row["outside"].items())
        print(f"{row['bug']:<36} {row['component']:<12} {row['own']:>5g} {row['integration']:>6g} "
              f"{row['other']:>6g}  {'yes' if row['public_caught'] else 'no':<6}  {where}")
    outside = [row["integration"] + row["other"] for row in rows]
    print(f"\n{len(rows)} bugs; lost outside their own component: integration "
          f"{sum(r['integration'] for r in rows):g}, non-integration {sum(r['other'] for r in rows):g} "
          f"points in all; per bug median {statistics.median(outside):g}, max {max(outside):g}; "
          f"bugs with a non-integration loss: {sum(r['other'] > 0 for r in rows)}, at most "
          f"{max(r['other'] for r in rows):g} points; "
          f"with more than 10 integration points: {sum(r['integration'] > 10 for r in rows)}; "
          f"caught by a public test of their own component: {sum(r['public_caught'] for r in rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
