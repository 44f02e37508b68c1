"""The options of every command that grades (check, grade, grade-all), declared once with their defaults
read from GradeOptions, and how `grader check` and `grader grade` run one grading and report it. Both the
student's command line (cli.py) and the instructors' (instructor/commands.py) build on it.
"""
import argparse
import json
import sys
from pathlib import Path

from .grading import GradeOptions, parse_components
from .spec import Status

PROGRESS_MARKS = {Status.PASSED: ".", Status.FAILED: "F", Status.NOT_ATTEMPTED: "-", Status.TIMED_OUT: "T",
                  Status.STALLED: "S", Status.CRASHED: "C", Status.ERROR: "E"}
"""What `grader check` and `grader grade` print as each test ends, one mark a status: a stub not written
yet is "-", not a failure."""


def judge_options() -> argparse.ArgumentParser:
    """The options of every command that grades (check, grade, grade-all), declared once."""
    defaults = GradeOptions()
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--only", metavar="A,B", type=parse_components, default=defaults.components,
                        help="only these components (comma-separated)")
    parent.add_argument("--timeout-scale", type=float, default=defaults.timeout_scale, metavar="X",
                        help="multiply every test's CPU time limit (e.g. 2 for a far slower CPU; load "
                             "does not need it)")
    parent.add_argument("--wall-scale", type=float, default=defaults.wall_scale, metavar="X",
                        help="multiply only the wall-clock backstops (patience on an overloaded machine: "
                             "no grade of code that finishes changes)")
    parent.add_argument("--time-limit", type=float, default=defaults.time_limit, metavar="SECONDS",
                        help="end within SECONDS: tests that could not finish in time are not run")
    return parent


def grade_options(args: argparse.Namespace, *, public_only: bool = False) -> GradeOptions:
    """The GradeOptions a command line asks for."""
    return GradeOptions(components=args.only, public_only=public_only, timeout_scale=args.timeout_scale,
                        time_limit=args.time_limit, wall_scale=args.wall_scale,
                        unsafe_no_sandbox=getattr(args, "unsafe_no_sandbox", False))


def run_judge(args: argparse.Namespace, path: str, *, public_only: bool, title: str) -> int:
    """Grade `path` (all tests, or the public ones), print the scorecard, and write --json."""
    from .grading import grade
    from .report import public_share, terminal, write_json
    from .results import safe_text
    from .salt import SaltUnavailable
    from .sandbox.errors import SandboxUnavailable
    from .sandbox.processes import own_memory_limited
    from .submission import SubmissionError, special_files
    from .suites import HiddenTestsMissing

    def progress(result) -> None:
        print(PROGRESS_MARKS[result.status], end="", file=sys.stderr, flush=True)
        if getattr(args, "progress", None):  # what a platform reports if it has to stop the grading
            with open(args.progress, "a") as file:
                file.write(json.dumps(result.to_json()) + "\n")

    for name in special_files(Path(path)) if Path(path).is_dir() else ():  # the sandbox copy leaves them out
        print(f"grader: left out {safe_text(name)}: not a regular file (a FIFO, a device or a socket)",
              file=sys.stderr)
    try:
        with own_memory_limited():
            card = grade(Path(path), grade_options(args, public_only=public_only), on_result=progress)
    except SubmissionError as error:
        print(f"grader: cannot read the submission: {safe_text(str(error))}", file=sys.stderr)
        return 2
    except (HiddenTestsMissing, SaltUnavailable, SandboxUnavailable) as error:
        print(f"grader: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # grade() has killed its worker on the way out
        print("\ngrader: interrupted", file=sys.stderr)
        return 130
    print(file=sys.stderr)
    print(terminal(card, safe_text(f"{title}: {path}")))
    if public_only:
        print(f"\n{public_share(card)}")
        print(f"isolation: {card.sandbox['summary']}")
    if args.json:  # last: the grading and its report went through, and every worker is dead
        write_json(card, Path(args.json))
    return 0
