"""Every test's status on the bug corpus, to show that a change (a faster grader) catches every bug
exactly as before, test for test.

`dump` grades each bug of examples/submissions/bugs.py on its own component (as `grader audit` does),
and the reference and the correct example in full, as grade-all grades (its judge processes,
`--jobs` at once), and writes {submission: {"component.test": "status: message"}} as JSON (a message's
first 200 characters); `compare` lists the tests of `before` whose status or message differs in
`after` (or that it lacks). Pin the salt, and run the grader under test (PYTHONPATH=another checkout
for the code before a change):

    GRADER_SALT=tests python benchmarks/corpus_statuses.py dump before.json [--only model,trainer]
    python benchmarks/corpus_statuses.py compare before.json after.json
"""
import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def dump(out: Path, components: list[str], workers: int) -> None:
    import grader
    from grader.grading import GradeOptions
    from grader.instructor.corpus import load_bugs
    from grader.instructor.runner import Job, grade_jobs, payload

    root = Path(grader.__file__).resolve().parents[1]
    module = load_bugs(root / "examples" / "submissions" / "bugs.py")
    with tempfile.TemporaryDirectory() as scratch:
        jobs = {bug.name: Job(*payload(module.materialize(bug, scratch)),
                              GradeOptions(components=(bug.component,)))
                for bug in module.BUGS if not components or bug.component in components}
        if not components:
            jobs |= {name: Job(*payload(Path(folder))) for name, folder in
                     (("REFERENCE", root / "solutions"), ("CORRECT", module.CORRECT))}
    names = list(jobs)
    statuses: dict[str, dict[str, str]] = {}
    start = time.monotonic()
    for index, result in grade_jobs(list(jobs.values()), workers):
        tests = (result["card"] or {}).get("tests", [])
        found = {f"{t['component']}.{t['name']}": f"{t['status']}: {t['message'][:200]}" for t in tests}
        statuses[names[index]] = found or {"(grading)": f"{result['outcome']}: {result['message']}"}
        failing = sum(not status.startswith("passed") for status in statuses[names[index]].values())
        print(names[index], failing, "failing", file=sys.stderr, flush=True)
    print(f"{time.monotonic() - start:.0f} s (grader at {root})", file=sys.stderr)
    out.write_text(json.dumps(statuses, indent=1, sort_keys=True))


def compare(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    differences = [f"{name} {test}: {status} -> {new.get(name, {}).get(test, 'absent')}"
                   for name, tests in old.items() for test, status in tests.items()
                   if new.get(name, {}).get(test) != status]
    count = sum(map(len, old.values()))
    print("\n".join(differences) or f"the same status and message for each of {count} tests")
    return 1 if differences else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump")
    dumping.add_argument("out", type=Path)
    dumping.add_argument("--only", default="", help="the bugs of these components only, comma-separated")
    dumping.add_argument("--jobs", type=int, default=2, help="gradings at once")
    comparing = commands.add_parser("compare")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out, [name for name in args.only.split(",") if name], args.jobs)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
