"""The `grader` command line: check, grade, grade-all, audit, release-stubs, release, list-tests, and
plugin commands.

A plugin command is an entry point in the `grader.commands` group, a `main(argv) -> int`
(e.g. `grader experiments`, from the experiments package): the grader never imports it
unless that command runs.
"""
import argparse
import sys
import tempfile
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from .corpus import DEFAULT as DEFAULT_CORPUS
from .gradescope import DEFAULT_HIDDEN_VISIBILITY, VISIBILITIES
from .spec import COMPONENTS
from .stubs import EditedStubs, release_stubs

PLUGIN_GROUP = "grader.commands"
# The student release (`grader release`) ships without the hidden suites, and refuses these commands.
STUDENT_RELEASE = not (Path(__file__).parent / "suites" / "hidden").is_dir()
INSTRUCTOR_COMMANDS = ("grade", "grade-all", "audit", "release-stubs", "release", "autograder")


def _components(text: str | None) -> tuple[str, ...]:
    return COMPONENTS if not text else tuple(name.strip() for name in text.split(",") if name.strip())


def _run_judge(args: argparse.Namespace, path: str, public_only: bool, title: str) -> int:
    from .report import public_share, terminal, write_json
    from .results import safe_text
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
    print(terminal(card, safe_text(f"{title}: {path}")))
    if public_only:
        print(f"\n{public_share(card)}")
    if args.json:  # last: the grading and its report went through, and every worker is dead
        write_json(card, Path(args.json))
    return 0


def _grade(args: argparse.Namespace) -> int:
    return _run_judge(args, args.submission, False, "Grade (hidden tests)")


def _check(args: argparse.Namespace) -> int:
    return _run_judge(args, args.path, True, "Check (public tests)")


def _grade_options(args: argparse.Namespace) -> tuple[str, ...]:
    """The `grader grade` options that grade-all passes on to each grading."""
    unknown = [name for name in _components(args.only) if name not in COMPONENTS]
    if unknown:
        raise ValueError(f"--only: no component {', '.join(unknown)} (components: {', '.join(COMPONENTS)})")
    return ((("--only", args.only) if args.only else ())
            + (("--timeout-scale", f"{args.timeout_scale:g}") if args.timeout_scale != 1 else ()))


def _grade_all(args: argparse.Namespace) -> int:
    from .classroom import ClassError
    from .grade_all import grade_all
    from .runner import BACKSTOP_SECONDS, VersionMismatch, default_workers

    try:
        seconds = BACKSTOP_SECONDS * max(1.0, args.timeout_scale)
        return grade_all(Path(args.submissions), Path(args.out), args.jobs or default_workers(),
                         args.scheduler, _grade_options(args), seconds, args.similarity)
    except (ClassError, VersionMismatch, ValueError, OSError) as error:  # OSError: a scheduler out of reach
        print(f"grader grade-all: {error}", file=sys.stderr)
        return 2


def _audit(args: argparse.Namespace) -> int:
    from .audit import audit, table
    from .runner import VersionMismatch, default_workers

    try:
        catches = audit(Path(args.corpus), args.bugs, args.jobs or default_workers(), args.scheduler)
    except (VersionMismatch, ValueError, OSError) as error:
        print(f"grader audit: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the runner has stopped the gradings under way
        return 130
    print(table(catches))
    return 0


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


def _autograder(args: argparse.Namespace) -> int:
    from .autograder import AutograderError, build_autograder
    try:
        out = build_autograder(Path(args.out), hidden_visibility=args.hidden_visibility,
                               timeout_scale=args.timeout_scale, force=args.force)
    except AutograderError as error:
        print(f"grader autograder: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out} (hidden tests: {args.hidden_visibility}); upload it on Gradescope's Configure "
          "Autograder page")
    return 0


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

    check = commands.add_parser("check", help="run the public tests on your exercises")
    check.add_argument("path", nargs="?", default="exercises")
    graders = [(check, _check)]
    if not student_release:
        grade = commands.add_parser("grade", help="grade a submission (directory, zip or notebook) with the "
                                    "hidden tests")
        grade.add_argument("submission")
        graders.append((grade, _grade))
    for command, run in graders:
        command.add_argument("--json", metavar="FILE", help="also write the scorecard as JSON")
        command.add_argument("--only", metavar="A,B", help="only these components")
        command.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                             help="multiply every test's time limit (e.g. 2 on a slow machine)")
        command.set_defaults(run=run)
    if not student_release:
        _instructor_commands(commands)

    listing = commands.add_parser("list-tests", help="every test with its component, points and visibility")
    listing.set_defaults(run=_list_tests)

    for name, point in plugins.items():
        package = point.value.split(":")[0]
        commands.add_parser(name, help=f"from {package} (grader {name} --help)", add_help=False)
    return parser


def _instructor_commands(commands: argparse._SubParsersAction) -> None:
    grade_all = commands.add_parser("grade-all", help="grade a class (a folder, an LMS export)")
    grade_all.add_argument("submissions", help="a folder of per-student folders, zips or notebooks, an LMS "
                                               "export (Gradescope, Canvas), or a zip of one")
    grade_all.add_argument("--out", required=True, metavar="DIR",
                           help="gradebook.csv, summary.md, <student>.json; a rerun grades only what changed")
    grade_all.add_argument("--only", metavar="A,B", help="only these components (passed on to grader grade)")
    grade_all.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                           help="multiply every test's time limit (passed on to grader grade)")
    grade_all.add_argument("--similarity", action="store_true",
                           help="also compare the students' code (copydetect): DIR/similarity.html")
    grade_all.set_defaults(run=_grade_all)
    audit = commands.add_parser("audit", help="which tests catch each bug of a bug corpus (mutation score)")
    audit.add_argument("bugs", nargs="*", metavar="BUG", help="only these bugs (default: all)")
    audit.add_argument("--corpus", default=str(DEFAULT_CORPUS), metavar="FILE",
                       help="a bug corpus (default: examples/submissions/bugs.py)")
    audit.set_defaults(run=_audit)
    for command in (grade_all, audit):
        command.add_argument("--jobs", type=int, metavar="N", help="gradings at once here (default: cores)")
        command.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                             help="grade on this Dask cluster (its workers have the grader installed)")

    stubs = commands.add_parser("release-stubs", help="regenerate exercises/ from solutions/")
    stubs.add_argument("--solutions", default="solutions", help="reference solutions (default: solutions/)")
    stubs.add_argument("--out", default="exercises", help="where the stubs go (default: exercises/)")
    stubs.add_argument("--force", action="store_true", help="overwrite edited stubs too (losing the edits)")
    stubs.set_defaults(run=_release_stubs)

    release = commands.add_parser("release", help="write the student distribution: folder DIR and DIR.zip")
    release.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder")
    release.add_argument("--force", action="store_true", help="replace a previous release in DIR")
    release.set_defaults(run=_release)

    autograder = commands.add_parser("autograder", help="write the Gradescope autograder zip (it holds the "
                                     "reference, the hidden tests and this deployment's salt)")
    autograder.add_argument("--out", required=True, metavar="ZIP", help="e.g. autograder.zip")
    autograder.add_argument("--hidden-visibility", choices=VISIBILITIES, default=DEFAULT_HIDDEN_VISIBILITY,
                            help="when students see the hidden tests' results (public ones: always; "
                                 f"default: {DEFAULT_HIDDEN_VISIBILITY})")
    autograder.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                            help="multiply every test's time limit on Gradescope (e.g. 3 on its default "
                                 "1/2 CPU)")
    autograder.add_argument("--force", action="store_true", help="replace an existing ZIP")
    autograder.set_defaults(run=_autograder)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a report never fails on a terminal that is not UTF-8
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
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
