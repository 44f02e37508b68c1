"""The instructors' commands: grade, grade-all, audit, release-stubs, release, autograder, salt. The
student release has none of them (it ships without this package)."""
import argparse
import sys
from pathlib import Path

from ..options import grade_options, judge_options, run_judge
from ..results import safe_text
from ..spec import BUDGETS, UNSAFE_FLAG
from ..stubs import EditedStubs, release_stubs
from .authoring import add_authoring_commands
from .corpus import DEFAULT as DEFAULT_CORPUS
from .gradescope import DEFAULT_HIDDEN_VISIBILITY, DEFAULT_TIMEOUT, VISIBILITIES
from .rehearse_class import LAYOUTS, REHEARSAL


def _refused_time_limit(args: argparse.Namespace, command: str) -> bool:
    """Say so, and True, where --time-limit would take points from correct work (gradescope.py)."""
    from .gradescope import time_limit_refused
    why = time_limit_refused(args.time_limit, args.timeout_scale)
    if why:
        print(f"grader {command}: {why}", file=sys.stderr)
    return bool(why)


def _grade(args: argparse.Namespace) -> int:
    if args.bundle_time_limit is not None:  # the bundle's step: checked when the bundle was built
        args.time_limit = args.bundle_time_limit
    elif _refused_time_limit(args, "grade"):
        return 2
    return run_judge(args, args.submission, public_only=False, title="Grade (hidden tests)")


def _security(args: argparse.Namespace) -> object:
    from .cluster import security
    return security(args.scheduler, args.tls_ca_file, args.tls_cert, args.tls_key)


def _export(args: argparse.Namespace) -> object:
    from .lms import ASSIGNMENT, Export
    if not args.lms:
        if args.roster or args.assignment:
            raise ValueError("--roster and --assignment go with --lms canvas|moodle")
        return None
    if not args.roster:
        raise ValueError(f"--lms {args.lms} needs --roster, the CSV {args.lms.title()} exports "
                         "(docs/grading.md)")
    return Export(args.lms, Path(args.roster), args.assignment or ASSIGNMENT, args.missing, args.moodle_id,
                  args.allow_unplaced)


def _grade_all(args: argparse.Namespace) -> int:
    from .classroom import ClassError
    from .grade_all import grade_all
    from .runner import VersionMismatch, default_workers

    if _refused_time_limit(args, "grade-all"):
        return 2
    try:
        seconds = BUDGETS.scaled(args.timeout_scale).backstop * max(1.0, args.wall_scale)
        given = {name: getattr(args, name) for name in ("similarity", "regrade") if hasattr(args, name)}
        return grade_all(Path(args.submissions), Path(args.out), workers=args.jobs or default_workers(),
                         scheduler=args.scheduler, options=grade_options(args), seconds=seconds,
                         export=_export(args), feedback=args.hidden if args.feedback else None,
                         security=_security(args), **given)  # what is not given: grade_all's defaults
    except (ClassError, VersionMismatch, ValueError, OSError) as error:  # OSError: a scheduler out of reach
        print(f"grader grade-all: {safe_text(str(error))}", file=sys.stderr)
        return 2


def _audit(args: argparse.Namespace) -> int:
    from .audit import audit, table
    from .runner import VersionMismatch, default_workers

    try:
        catches = audit(Path(args.corpus), args.bugs, args.jobs or default_workers(), args.scheduler,
                        _security(args))
    except (VersionMismatch, ValueError, OSError) as error:
        print(f"grader audit: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the runner has stopped the gradings under way
        return 130
    print(table(catches))
    return 0


def _rehearse(args: argparse.Namespace) -> int:
    from .cluster import ClusterError
    from .rehearse import Deployment, rehearse, table
    from .runner import default_workers

    try:
        deployment = Deployment(args.jobs or default_workers(), args.scheduler, _security(args),
                                Path(args.bundle) if args.bundle else None)
        checks = rehearse(Path(args.out), deployment, layout=args.lms, quick=args.quick, size=args.size)
    except (ClusterError, OSError) as error:  # OSError: a scheduler out of reach
        print(f"grader rehearse: {safe_text(str(error))}", file=sys.stderr)
        return 2
    print(table(checks))
    print(f"wrote {Path(args.out) / 'rehearsal.md'}")
    return 1 if any(check.passed is False for check in checks) else 0


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
                               timeout_scale=args.timeout_scale, timeout=args.timeout, force=args.force,
                               unsafe_no_sandbox=args.unsafe_no_sandbox)
    except AutograderError as error:
        print(f"grader autograder: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out} (hidden tests: {args.hidden_visibility}); upload it on Gradescope's Configure "
          "Autograder page")
    return 0


def _salt(args: argparse.Namespace) -> int:
    from . import salt_file
    try:
        if args.action == "show":
            print(salt_file.show())
        elif args.file is None:
            raise salt_file.SaltError(f"grader salt {args.action} needs a FILE")
        elif args.action == "export":
            print(salt_file.export(Path(args.file)))
        else:
            print(salt_file.restore(Path(args.file), force=args.force))
    except salt_file.SaltError as error:
        print(f"grader salt: {error}", file=sys.stderr)
        return 2
    return 0


def _handback_options(grade_all: argparse.ArgumentParser) -> None:
    """grade-all's options for what goes back to the LMS and to the students."""
    from .feedback import HIDDEN
    from .lms import LMS, MISSING, MOODLE_IDS

    grade_all.add_argument("--lms", choices=LMS, help="also DIR/canvas.csv or DIR/moodle.csv for the LMS's "
                                                      "gradebook import (needs --roster)")
    grade_all.add_argument("--roster", metavar="CSV", help="what the LMS exports (Canvas: Grades > Export; "
                                                            "Moodle: the assignment's grading worksheet)")
    grade_all.add_argument("--assignment", metavar="NAME",
                           help="the LMS's column for the grade: the roster's column so named, or a new one")
    grade_all.add_argument("--missing", choices=MISSING, default="zero",
                           help="a roster student without a submission: 0 (default) or blank (no grade)")
    grade_all.add_argument("--moodle-id", choices=tuple(MOODLE_IDS), default="email",
                           help="with --lms moodle and a gradebook export as roster: the user field rows are "
                                "matched by (default: email; the grading worksheet needs none)")
    grade_all.add_argument("--allow-unplaced", action="store_true",
                           help="write the LMS file even with grades it cannot place (a submission matching "
                                "no roster row is left out, a grading that did not end is blank); each is "
                                "listed either way, and without this the file is not written (exit 3)")
    grade_all.add_argument("--feedback", action="store_true",
                           help="also DIR/feedback/<student>.md and .html, to hand back")
    grade_all.add_argument("--hidden", choices=HIDDEN, default="score",
                           help="what the feedback shows of hidden tests: their points per component "
                                "(default), each one's name and result, or its message too (never an input)")


def _unsafe_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(UNSAFE_FLAG, action="store_true",
                         help="grade even where there is no sandbox ('plain' mode: the submission's code"
                              " runs as you and can read the reference and the hidden tests); the report"
                              " says so")


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add the instructors' commands to the `grader` command line."""
    judged = judge_options()
    grade = commands.add_parser("grade", parents=[judged], help="grade a submission (directory, zip or "
                                "notebook) with the hidden tests")
    grade.add_argument("submission")
    grade.add_argument("--json", metavar="FILE", help="also write the scorecard as JSON")
    grade.add_argument("--progress", metavar="FILE", help="append each test's result to FILE as it ends "
                                                          "(a JSON line each)")
    grade.add_argument("--bundle-time-limit", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    _unsafe_option(grade)
    grade.set_defaults(run=_grade)

    grade_all = commands.add_parser("grade-all", parents=[judged],
                                    help="grade a class (a folder, an LMS export)")
    grade_all.add_argument("submissions", help="a folder of per-student folders, zips or notebooks, an LMS "
                                               "export (Gradescope, Canvas), or a zip of one")
    grade_all.add_argument("--out", required=True, metavar="DIR",
                           help="gradebook.csv, summary.md, <student>.json; a rerun grades only what changed")
    grade_all.add_argument("--regrade", choices=["timed_out"], default=argparse.SUPPRESS,
                           help="grade again only the submissions that timed out, with more patience "
                                "(the same CPU limits: the others keep their grades)")
    grade_all.add_argument("--similarity", action="store_true", default=argparse.SUPPRESS,
                           help="also compare the students' code (copydetect): DIR/similarity.html")
    _handback_options(grade_all)
    _unsafe_option(grade_all)
    grade_all.set_defaults(run=_grade_all)
    audit = commands.add_parser("audit", help="which tests catch each bug of a bug corpus (mutation score)")
    audit.add_argument("bugs", nargs="*", metavar="BUG", help="only these bugs (default: all)")
    audit.add_argument("--corpus", default=str(DEFAULT_CORPUS), metavar="FILE",
                       help="a bug corpus (default: examples/submissions/bugs.py)")
    audit.set_defaults(run=_audit)
    rehearse = commands.add_parser("rehearse", help="grade a synthetic class through this deployment and "
                                   "check it end to end, before the students submit")
    rehearse.add_argument("--out", default=REHEARSAL, metavar="DIR",
                          help=f"the class, its grades and rehearsal.md (default: {REHEARSAL})")
    rehearse.add_argument("--quick", action="store_true",
                          help="a sample of the class: a first look in minutes")
    rehearse.add_argument("--size", type=int, metavar="N",
                          help="N students (the bugs again under fresh names)")
    rehearse.add_argument("--lms", choices=LAYOUTS, default=LAYOUTS[0],
                          help=f"the export (and roster) the class comes as (default: {LAYOUTS[0]})")
    rehearse.add_argument("--bundle", metavar="ZIP", help="grade each submission through this Gradescope "
                                                          "bundle's run_autograder (grader autograder)")
    rehearse.set_defaults(run=_rehearse)
    for command in (grade_all, audit, rehearse):
        command.add_argument("--jobs", type=int, metavar="N", help="gradings at once here (default: cores)")
        command.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                             help="grade on this Dask cluster (its workers have the grader installed)")
        for option, what in (("--tls-ca-file", "the CA's certificate"), ("--tls-cert", "your certificate"),
                             ("--tls-key", "your certificate's key")):
            command.add_argument(option, metavar="FILE", help=f"with a tls:// scheduler: {what} (PEM)")

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
                            help="multiply every test's CPU time limit on Gradescope (its 1/2 CPU does "
                                 "not need it: limits count CPU time)")
    autograder.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                            help="the assignment's timeout on Gradescope: the grading ends within it, "
                                 f"tests it has no time for 'not run' (default: {DEFAULT_TIMEOUT:g})")
    autograder.add_argument("--force", action="store_true", help="replace an existing ZIP")
    _unsafe_option(autograder)
    autograder.set_defaults(run=_autograder)

    salt = commands.add_parser("salt", help="show, export or restore this deployment's salt (it decides the "
                               "hidden inputs: keep it)")
    salt.add_argument("action", choices=("show", "export", "restore"))
    salt.add_argument("file", nargs="?", metavar="FILE", help="where to export it, or what to restore")
    salt.add_argument("--force", action="store_true", help="restore over another salt (regrades everyone)")
    salt.set_defaults(run=_salt)
    add_authoring_commands(commands)
