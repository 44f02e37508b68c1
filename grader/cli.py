"""The `grader` command line: check, grade, grade-all, audit, release-stubs, release, list-tests, and
plugin commands.

A plugin command is an entry point in the `grader.commands` group, a `main(argv) -> int`
(e.g. `grader experiments`, from the experiments package): the grader never imports it
unless that command runs.
"""
import argparse
import sys
from importlib.metadata import EntryPoint, entry_points
from importlib.util import find_spec

from .options import judge_options, run_judge

PLUGIN_GROUP = "grader.commands"
STUDENT_RELEASE = find_spec("grader.instructor") is None
"""The student release (`grader release`) ships without grader/instructor/ and the hidden suites:
its command line has only the student's commands."""


def _check(args: argparse.Namespace) -> int:
    return run_judge(args, args.path, public_only=True, title="Check (public tests)")


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
