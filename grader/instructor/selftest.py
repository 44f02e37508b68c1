"""`grader selftest --only NAME`: an author's inner loop on one component (docs/authoring.md).

It grades, with that component's tests only: the reference (every test must pass), the correct example
(every test must pass: the tests accept more than the reference's way), and each of the component's bugs
in the corpus, examples/submissions/bugs.py: a bug must fail a test of its own component, with a message
that names one of its keywords (what a student would need to find it). Crash bugs (a hang, an exit) test
the grader rather than the component's tests, and cost seconds each: they are named, not graded
(tests/autograder/judge/test_grade_examples.py grades them). Seconds for a small component.
"""
import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..spec import Status
from .corpus import DEFAULT as DEFAULT_CORPUS
from .corpus import load_bugs

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Verdict:
    """One submission graded: what it is, whether it did what it should, and what was seen."""

    what: str
    ok: bool
    said: str


def _graded(submission: Path, component: str) -> list:
    from ..judge import judge
    return judge(submission, components=(component,))


def _passes(what: str, submission: Path, component: str) -> Verdict:
    """Every test of `component` passes on `submission`."""
    results = _graded(submission, component)
    failed = [f"{r.name}: {r.status} {r.message}" for r in results if r.status is not Status.PASSED]
    points = sum(r.score for r in results)
    return Verdict(what, bool(results) and not failed,
                   "; ".join(failed) or f"{len(results)} tests passed, {points:g} points")


def _caught(bug: object, submission: Path) -> Verdict:
    """The bug fails a test of its component, with a message naming one of its keywords."""
    results = _graded(submission, bug.component)
    lost = [r for r in results if r.status is not Status.PASSED]
    messages = " ".join(r.message.lower() for r in lost)
    named = [word for word in bug.keywords if word in messages]
    what = f"bug {bug.name}"
    if not lost:
        return Verdict(what, False, f"no {bug.component} test failed ({bug.description})")
    if not named:
        first = lost[0].message.splitlines()[0] if lost[0].message else lost[0].status
        return Verdict(what, False, f"{len(lost)} tests lost, but no message names {bug.keywords}: {first}")
    return Verdict(what, True, f"{len(lost)} tests lost ({', '.join(r.name for r in lost)}); "
                               f"the message names {named[0]!r}")


def selftest(component: str, *, repo: Path = REPO, corpus: Path = DEFAULT_CORPUS) -> list[Verdict]:
    """The reference, the correct example and every bug of `component` in the corpus, graded and judged."""
    bugs = load_bugs(corpus)
    verdicts = [_passes("reference", repo / "solutions", component),
                _passes("correct example", bugs.CORRECT, component)]
    own = [bug for bug in bugs.BUGS if bug.component == component and not bug.crash]
    crashes = [bug.name for bug in bugs.BUGS if bug.component == component and bug.crash]
    if crashes:
        verdicts.append(Verdict("crash bugs", True, f"{', '.join(crashes)}: not graded here "
                                                    "(test_grade_examples)"))
    if not own:
        verdicts.append(Verdict("bugs", False, f"the corpus ({corpus.name}) has no bug of {component}: "
                                               "add one (docs/authoring.md, 'A bug for the corpus')"))
    with tempfile.TemporaryDirectory(prefix="selftest-") as scratch:
        verdicts += [_caught(bug, bugs.materialize(bug, scratch)) for bug in own]
    return verdicts


def run(args: argparse.Namespace) -> int:
    """`grader selftest --only A,B`: exit 1 when any verdict is not ok."""
    failed = False
    for component in args.only:
        print(f"{component}:")
        for verdict in selftest(component):
            print(f"  {'ok  ' if verdict.ok else 'FAIL'} {verdict.what}: {verdict.said}")
            failed |= not verdict.ok
    if failed:
        print("grader selftest: a check failed (docs/authoring.md, 'The inner loop')", file=sys.stderr)
    return 1 if failed else 0
