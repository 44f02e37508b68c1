"""The `grader` command line: check, grade, grade-all, audit, release-stubs, release, list-tests, and
plugin commands.

A plugin command is an entry point in the `grader.commands` group, a `main(argv) -> int`
(e.g. `grader experiments`, from the experiments package): the grader never imports it
unless that command runs.
"""
import argparse
import json
import sys
from importlib.metadata import EntryPoint, entry_points
from importlib.util import find_spec
from pathlib import Path

from .grading import GradeOptions, parse_components

PLUGIN_GROUP = "grader.commands"
STUDENT_RELEASE = find_spec("grader.instructor") is None
"""The student release (`grader release`) ships without grader/instructor/ and the hidden suites:
its command line has only the student's commands."""


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


def grade_options(args: argparse.Namespace, public_only: bool = False) -> GradeOptions:
    return GradeOptions(args.only, public_only, args.timeout_scale, args.time_limit,
                        getattr(args, "unsafe_no_sandbox", False), args.wall_scale)


def run_judge(args: argparse.Namespace, path: str, public_only: bool, title: str) -> int:
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
        print("." if result.status == "passed" else "F", end="", file=sys.stderr, flush=True)
        if getattr(args, "progress", None):  # what a platform reports if it has to stop the grading
            with open(args.progress, "a") as file:
                file.write(json.dumps(result.to_json()) + "\n")

    for name in special_files(Path(path)) if Path(path).is_dir() else ():  # the sandbox copy leaves them out
        print(f"grader: left out {safe_text(name)}: not a regular file (a FIFO, a device or a socket)",
              file=sys.stderr)
    try:
        with own_memory_limited():
            card = grade(Path(path), grade_options(args, public_only), on_result=progress)
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


def _check(args: argparse.Namespace) -> int:
    return run_judge(args, args.path, True, "Check (public tests)")


def _list_tests(args: argparse.Namespace) -> int:
    from .suites import all_cases
    for case in all_cases(public_only=STUDENT_RELEASE):
        kind = case.visibility.value + (" integration" if case.integration else "")
        print(f"{case.component:<12} {case.points:>4g}  {kind:<18}  {case.name}: {case.doc}")
    return 0


def _plugins() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=PLUGIN_GROUP)}


def build_parser(plugins: dict[str, EntryPoint],
                 student_release: bool = STUDENT_RELEASE) -> argparse.ArgumentParser:
    """The command line; a student release's lists only the commands it can run."""
    parser = argparse.ArgumentParser(prog="grader",
                                     description="Module 9 Transformer lab: autograder and tools")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", parents=[judge_options()],
                                help="run the public tests on your exercises")
    check.add_argument("path", nargs="?", default="exercises")
    check.add_argument("--json", metavar="FILE", help="also write the scorecard as JSON")
    check.set_defaults(run=_check)
    if not student_release:
        from .instructor.commands import add_commands

        add_commands(commands)

    listing = commands.add_parser("list-tests", help="every test with its component, points and visibility")
    listing.set_defaults(run=_list_tests)

    for name, point in plugins.items():
        package = point.value.split(":")[0]
        commands.add_parser(name, help=f"from {package} (grader {name} --help)", add_help=False)
    return parser


def command_names(parser: argparse.ArgumentParser) -> set[str]:
    """The subcommands `parser` accepts."""
    return {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a report never fails on a terminal that is not UTF-8
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    plugins = _plugins()
    if argv and argv[0] in plugins:
        return plugins[argv[0]].load()(argv[1:])
    parser = build_parser(plugins)
    if STUDENT_RELEASE and argv and not argv[0].startswith("-") and argv[0] not in command_names(parser):
        print(f"grader {argv[0]}: not a command of the student release (grading with the hidden tests "
              "is for instructors: they and the reference solutions are not part of it). `grader check` "
              "runs the public tests.", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return args.run(args)


def console() -> None:
    """The `grader` command, and `python -m grader.cli`: main(), then its exit status."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    console()
