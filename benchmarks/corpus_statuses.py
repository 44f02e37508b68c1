"""Every test's status on the bug corpus, to show that a change (a faster grader) catches every bug
exactly as before, test for test.

`dump` grades each bug of examples/submissions/bugs.py on its own component (as `grader audit` does),
and the reference and the correct example in full, in this process, and writes
{submission: {"component.test": status}} as JSON; `compare` lists the tests of `before` whose
status differs in `after` (or that it lacks). Pin the salt, and run the grader under test
(PYTHONPATH=another checkout for the code before a change):

    GRADER_SALT=tests python benchmarks/corpus_statuses.py dump before.json [--only model,trainer]
    python benchmarks/corpus_statuses.py compare before.json after.json
"""
import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def dump(out: Path, components: list[str]) -> None:
    import grader
    from grader.instructor.corpus import load_bugs
    from grader.judge import judge

    root = Path(grader.__file__).resolve().parents[1]
    module = load_bugs(root / "examples" / "submissions" / "bugs.py")
    statuses: dict[str, dict[str, str]] = {}
    start = time.process_time()
    with tempfile.TemporaryDirectory() as scratch:
        for bug in module.BUGS:
            if not components or bug.component in components:
                results = judge(module.materialize(bug, scratch), components=(bug.component,))
                statuses[bug.name] = {f"{r.component}.{r.name}": r.status.value for r in results}
                print(bug.name, sum(s != "passed" for s in statuses[bug.name].values()), "failing",
                      file=sys.stderr, flush=True)
    if not components:
        for name, folder in (("REFERENCE", root / "solutions"), ("CORRECT", module.CORRECT)):
            statuses[name] = {f"{r.component}.{r.name}": r.status.value for r in judge(Path(folder))}
    print(f"judge's CPU: {time.process_time() - start:.1f} s (grader at {root})", file=sys.stderr)
    out.write_text(json.dumps(statuses, indent=1, sort_keys=True))


def compare(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    differences = [f"{name} {test}: {status} -> {new.get(name, {}).get(test, 'absent')}"
                   for name, tests in old.items() for test, status in tests.items()
                   if new.get(name, {}).get(test) != status]
    print("\n".join(differences) or f"the same status for each of {sum(map(len, old.values()))} tests")
    return 1 if differences else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump")
    dumping.add_argument("out", type=Path)
    dumping.add_argument("--only", default="", help="the bugs of these components only, comma-separated")
    comparing = commands.add_parser("compare")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out, [name for name in args.only.split(",") if name])
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
