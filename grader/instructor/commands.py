"""The instructors' commands: grade, grade-all, audit, release-stubs, release, autograder. The
student release has none of them (it ships without this package)."""
import argparse
import sys
from pathlib import Path

from ..cli import grade_options, judge_options, run_judge
from ..spec import BUDGETS
from ..stubs import EditedStubs, release_stubs
from .corpus import DEFAULT as DEFAULT_CORPUS
from .gradescope import DEFAULT_HIDDEN_VISIBILITY, VISIBILITIES


def _grade(args: argparse.Namespace) -> int:
    return run_judge(args, args.submission, False, "Grade (hidden tests)")


def _grade_all(args: argparse.Namespace) -> int:
    from .classroom import ClassError
    from .grade_all import grade_all
    from .runner import VersionMismatch, default_workers

    try:
        seconds = BUDGETS.scaled(args.timeout_scale).backstop
        return grade_all(Path(args.submissions), Path(args.out), args.jobs or default_workers(),
                         args.scheduler, grade_options(args), seconds, args.similarity)
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


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add the instructors' commands to the `grader` command line."""
    judged = judge_options()
    grade = commands.add_parser("grade", parents=[judged], help="grade a submission (directory, zip or "
                                "notebook) with the hidden tests")
    grade.add_argument("submission")
    grade.add_argument("--json", metavar="FILE", help="also write the scorecard as JSON")
    grade.set_defaults(run=_grade)

    grade_all = commands.add_parser("grade-all", parents=[judged],
                                    help="grade a class (a folder, an LMS export)")
    grade_all.add_argument("submissions", help="a folder of per-student folders, zips or notebooks, an LMS "
                                               "export (Gradescope, Canvas), or a zip of one")
    grade_all.add_argument("--out", required=True, metavar="DIR",
                           help="gradebook.csv, summary.md, <student>.json; a rerun grades only what changed")
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
