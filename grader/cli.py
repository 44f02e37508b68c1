"""The `grader` command line: check, grade, release-stubs, release, list-tests, and plugin commands.

A plugin command is an entry point in the `grader.commands` group, a `main(argv) -> int`
(e.g. `grader experiments`, from the experiments package): the grader never imports it
unless that command runs.
"""
import argparse
import sys
import tempfile
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from .spec import COMPONENTS
from .stubs import EditedStubs, release_stubs

PLUGIN_GROUP = "grader.commands"
# The student release (`grader release`) ships without the hidden suites, and refuses these commands.
STUDENT_RELEASE = not (Path(__file__).parent / "suites" / "hidden").is_dir()
INSTRUCTOR_COMMANDS = ("grade", "release-stubs", "release")


def _components(text: str | None) -> tuple[str, ...]:
    return COMPONENTS if not text else tuple(name.strip() for name in text.split(",") if name.strip())


def _run_judge(args: argparse.Namespace, path: str, public_only: bool, title: str) -> int:
    from .report import public_share, terminal, write_json
    from .sandbox.client import Sandbox
    from .scoring import scorecard
    from .submission import SubmissionError, unpack

    with tempfile.TemporaryDirectory(prefix="submission-") as scratch, \
            tempfile.TemporaryDirectory(prefix="grader-") as work:
        try:
            directory = unpack(Path(path), Path(scratch))
        except SubmissionError as error:
            print(f"grader: cannot read the submission: {error}", file=sys.stderr)
            return 2
        sandbox = Sandbox(directory, Path(work))
        sandbox.start()  # the worker imports torch while this process does, just below
        from .judge import judge
        from .suites import HiddenTestsMissing

        def progress(result) -> None:
            print("." if result.status == "passed" else "F", end="", file=sys.stderr, flush=True)

        try:
            components = _components(args.only)
            card = scorecard(judge(directory, public_only=public_only, components=components,
                                   timeout_scale=args.timeout_scale, on_result=progress, sandbox=sandbox))
        except (ValueError, HiddenTestsMissing) as error:
            print(f"grader: {error}", file=sys.stderr)
            return 2
    print(file=sys.stderr)
    print(terminal(card, f"{title}: {path}"))
    if public_only:
        print(f"\n{public_share(card)}")
    if args.json:
        write_json(card, Path(args.json))
    return 0


def _grade(args: argparse.Namespace) -> int:
    return _run_judge(args, args.submission, False, "Grade (hidden tests)")


def _check(args: argparse.Namespace) -> int:
    return _run_judge(args, args.path, True, "Check (public tests)")


def _release_stubs(args: argparse.Namespace) -> int:
    try:
        written = release_stubs(Path(args.solutions), Path(args.out), force=args.force)
    except EditedStubs as error:
        print(f"grader release-stubs: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def _release(args: argparse.Namespace) -> int:
    from .release import ReleaseError, build_release
    try:
        print(f"wrote {args.out} and {build_release(Path(args.out), force=args.force)}")
    except ReleaseError as error:
        print(f"grader release: {error}", file=sys.stderr)
        return 2
    return 0


def _list_tests(args: argparse.Namespace) -> int:
    from .suites import all_cases
    for case in all_cases(public_only=STUDENT_RELEASE):
        kind = case.visibility.value + (" integration" if case.integration else "")
        print(f"{case.component:<12} {case.points:>4g}  {kind:<18}  {case.name}: {case.doc}")
    return 0


def _plugins() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=PLUGIN_GROUP)}


def build_parser(plugins: dict[str, EntryPoint]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader",
                                     description="Module 9 Transformer lab: autograder and tools")
    commands = parser.add_subparsers(dest="command", required=True)

    grade = commands.add_parser("grade",
                                help="grade a submission (directory, zip or notebook) with the hidden tests")
    grade.add_argument("submission")
    check = commands.add_parser("check", help="run the public tests on your exercises")
    check.add_argument("path", nargs="?", default="exercises")
    for command, run in ((grade, _grade), (check, _check)):
        command.add_argument("--json", metavar="FILE", help="also write the scorecard as JSON")
        command.add_argument("--only", metavar="A,B", help="only these components")
        command.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                             help="multiply every test's time limit (e.g. 2 on a slow machine)")
        command.set_defaults(run=run)

    stubs = commands.add_parser("release-stubs", help="regenerate exercises/ from solutions/")
    stubs.add_argument("--solutions", default="solutions", help="reference solutions (default: solutions/)")
    stubs.add_argument("--out", default="exercises", help="where the stubs go (default: exercises/)")
    stubs.add_argument("--force", action="store_true", help="overwrite edited stubs too (losing the edits)")
    stubs.set_defaults(run=_release_stubs)

    release = commands.add_parser("release", help="write the student distribution: folder DIR and DIR.zip")
    release.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder")
    release.add_argument("--force", action="store_true", help="replace a previous release in DIR")
    release.set_defaults(run=_release)

    listing = commands.add_parser("list-tests", help="every test with its component, points and visibility")
    listing.set_defaults(run=_list_tests)

    for name, point in plugins.items():
        package = point.value.split(":")[0]
        commands.add_parser(name, help=f"from {package} (grader {name} --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    plugins = _plugins()
    if argv and argv[0] in plugins:
        return plugins[argv[0]].load()(argv[1:])
    if STUDENT_RELEASE and argv and argv[0] in INSTRUCTOR_COMMANDS:
        print(f"grader {argv[0]} is for instructors: the hidden tests and the reference solutions are not "
              "part of the student release. `grader check` runs the public tests.", file=sys.stderr)
        return 2
    args = build_parser(plugins).parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
