"""`grader grade-all`: grade a class into DIR, resumably, on this machine or a Dask cluster.

DIR gets `<student>.json` for each graded student (what `grader grade --json` writes), each
written as its grading ends; `gradebook.csv`, `summary.md` with its figures, and
`similarity.html` with --similarity; `canvas.csv` or `moodle.csv` with --lms (instructor/lms.py:
not written where a grade cannot be placed, unless allowed); `feedback/<student>.md` and `.html`
with --feedback (instructor/feedback.py), and `feedback/lms_upload.zip` for an LMS's bulk upload; and
`.grade-all-state.json`: per student, the hash of what was graded (its bytes and the options), the
grader version, the outcome. A rerun grades again only what changed (the submission or the grader)
or did not end well (error, timed out); what Ctrl-C interrupted is graded next time, and nothing
already written is lost. `--regrade timed_out` grades only the timed-out ones again, with more
patience (runner.REGRADE_SCALE).
"""
import dataclasses
import json
import sys
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_atomic
from ..grading import GradeOptions
from ..results import markdown_text, safe_text
from ..spec import BUDGETS, COMPONENTS
from . import lms
from .classroom import Submission, discover
from .feedback import write_feedback
from .gradebook import Row, summary, write_figures, write_gradebook
from .runner import FINAL, REGRADE_SCALE, Empty, Job, Outcome, Unreadable, grade_jobs, grader_version, payload

STATE = ".grade-all-state.json"  # hidden: no student id (student_id strips leading dots) can clash


@dataclass
class Entry:
    """A submission of this run: its job (None when empty or unreadable), the hash it is recorded under."""

    submission: Submission
    job: Job | None
    digest: str
    problem: str = ""
    outcome: Outcome = Outcome.EMPTY


def _entries(submissions: list[Submission], options: GradeOptions, seconds: float) -> list[Entry]:
    entries = []
    for submission in submissions:
        if submission.problem:
            entries.append(Entry(submission, None, "", submission.problem, Outcome.UNREADABLE))
            continue
        try:
            name, data = payload(submission.source)
        except Empty as empty:
            entries.append(Entry(submission, None, "", str(empty)))
            continue
        except Unreadable as unreadable:
            entries.append(Entry(submission, None, "", str(unreadable), Outcome.UNREADABLE))
            continue
        job = Job(name, data, options, seconds)
        entries.append(Entry(submission, job, job.digest()))
    return entries


def _load_state(out: Path) -> dict:
    try:
        return json.loads((out / STATE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}  # a first run (the state is written atomically: never half a file)


def _current(record: dict | None, entry: Entry, version: str) -> bool:
    """Whether `record` is the outcome of grading this entry with this grader."""
    return bool(record) and record["hash"] == entry.digest and record["grader"] == version


def _done(state: dict, entry: Entry, version: str, out: Path) -> bool:
    """Whether a rerun can keep this entry's outcome."""
    records = [state.get(student) for student in entry.submission.students]
    return all(_current(r, entry, version) and r["status"] in FINAL
               and (r["status"] != Outcome.GRADED or (out / f"{s}.json").is_file())
               for r, s in zip(records, entry.submission.students, strict=True))


def _timed_out(state: dict, entry: Entry, version: str) -> bool:
    """Whether this entry's outcome, graded as it is now, is timed_out (for --regrade timed_out)."""
    records = [state.get(student) for student in entry.submission.students]
    return all(_current(r, entry, version) and r["status"] == Outcome.TIMED_OUT for r in records)


def _patient(job: Job) -> Job:
    """The job with REGRADE_SCALE times the wall-clock backstops (the CPU limits, and so the grade of
    code that finishes, unchanged); it is recorded under the hash of the job as it was."""
    options = dataclasses.replace(job.options, wall_scale=job.options.wall_scale * REGRADE_SCALE)
    return dataclasses.replace(job, options=options, seconds=job.seconds * REGRADE_SCALE)


def _record(state: dict, out: Path, entry: Entry, version: str, result: dict) -> None:
    """Write each student's scorecard (or remove an outdated one), then the state."""
    for student in entry.submission.students:
        card_file = out / f"{student}.json"
        if result.get("card"):  # graded, or graded in part (timed out)
            write_atomic(card_file, json.dumps(result["card"], indent=2) + "\n")
        else:
            card_file.unlink(missing_ok=True)  # an earlier grade of what is no longer the submission
        state[student] = {"hash": entry.digest, "grader": version, "status": result["outcome"],
                          "message": safe_text(result["message"]),  # it may quote any file name
                          "submission": safe_text(entry.submission.source.name),
                          "seconds": result.get("seconds", 0.0)}
    write_atomic(out / STATE, json.dumps(state, indent=1, sort_keys=True) + "\n")


def _rows(entries: list[Entry], state: dict, version: str, out: Path) -> list[Row]:
    rows = []
    for entry in entries:
        for student in entry.submission.students:
            record, keys = state.get(student), entry.submission.keys.get(student, ())
            if not _current(record, entry, version):
                rows.append(Row(student, Outcome.PENDING, "not graded yet: run grade-all again", keys=keys))
            elif record["status"] == Outcome.GRADED or (out / f"{student}.json").is_file():
                card = json.loads((out / f"{student}.json").read_text())
                rows.append(Row(student, Outcome(record["status"]), record["message"], card, keys=keys))
            else:
                rows.append(Row(student, Outcome(record["status"]), record["message"], keys=keys))
    return sorted(rows, key=lambda row: row.student)


def _grade(todo: list[Entry], state: dict, out: Path, version: str, workers: int,
           scheduler: str | None, security: object = None) -> None:
    from tqdm import tqdm

    if not todo:
        return
    where = f"on {scheduler}" if scheduler else f"{workers} at a time"
    results = grade_jobs([entry.job for entry in todo], workers, scheduler, security)
    with tqdm(total=len(todo), desc=f"grading ({where})", unit="submission", file=sys.stderr) as bar, \
            closing(results):  # Ctrl-C here, or a mismatch: the runner stops what still runs
        for index, result in results:
            entry = todo[index]
            _record(state, out, entry, version, result)
            bar.set_postfix_str(f"{entry.submission.students[0]}: {result['outcome']}", refresh=False)
            bar.update()


UNPLACED = 3
"""grade-all's exit status when grades cannot be placed in the LMS file (which is then not written)."""


def grade_all(submissions: Path, out: Path, *, workers: int, scheduler: str | None = None,
              options: GradeOptions | None = None, seconds: float = BUDGETS.backstop,
              similarity: bool = False, export: lms.Export | None = None, feedback: str | None = None,
              security: object = None, regrade: str | None = None) -> int:
    """Grade every submission in `submissions` into `out`; 0 when all was graded, 130 after Ctrl-C,
    UNPLACED when the LMS file holds grades that cannot be placed (lms.Written.problems: then it is not
    written unless export.allow_unplaced; each is said on stderr either way).
    `export`: also the LMS's gradebook; `feedback`: also each student's feedback, hidden tests shown
    by that policy; `security`: the Dask cluster's TLS (runner.grade_jobs); with regrade="timed_out",
    only those that timed out, again, with more patience.
    Raises classroom.ClassError for input that is not a class, runner.VersionMismatch,
    lms.RosterError for a roster the LMS did not write, ValueError for --only with an LMS file (a
    part of the lab is not the assignment's grade); both before any grading."""
    out, options = Path(out), options or GradeOptions()
    if export:
        if set(options.components) != set(COMPONENTS):
            raise ValueError(f"--only {','.join(options.components)} with --lms: the LMS's column is the "
                             f"whole lab's grade, out of {lms.MAXIMUM:g}; grade every component (no --only) "
                             "for the LMS file")
        lms.check(export)
    out.mkdir(parents=True, exist_ok=True)
    version = grader_version()
    with tempfile.TemporaryDirectory(prefix="grade-all-") as scratch:
        found = discover(Path(submissions), Path(scratch), skip=out)
        entries = _entries(found, options, seconds)
    _say_notes(found)
    state = _load_state(out)
    for entry in entries:
        if entry.job is None:
            _record(state, out, entry, version, {"outcome": entry.outcome, "message": entry.problem})
    if regrade == Outcome.TIMED_OUT:
        todo = [dataclasses.replace(entry, job=_patient(entry.job)) for entry in entries
                if entry.job and _timed_out(state, entry, version)]
    else:
        todo = [entry for entry in entries if entry.job and not _done(state, entry, version, out)]
    students = sum(len(entry.submission.students) for entry in entries)
    print(f"{len(entries)} submissions ({students} students): {len(todo)} to grade, "
          f"{len(entries) - len(todo)} unchanged or empty", file=sys.stderr)
    interrupted = False
    try:
        _grade(todo, state, out, version, workers, scheduler, security)
    except KeyboardInterrupt:
        interrupted = True
    rows = _rows(entries, state, version, out)
    similar = _similarity(entries, out) if similarity and not interrupted else None
    write_gradebook(rows, out / "gradebook.csv")
    written = lms.write(rows, export, out) if export else None
    if feedback:
        handback = {student: s.handback for s in found if s.handback for student in s.students}
        write_feedback(rows, out / "feedback", feedback, handback)
    write_figures(rows, out)
    handed = lms.section(written) if written else []
    write_atomic(out / "summary.md", "\n".join([summary(rows, version, similar), *_notes_section(found),
                                                *handed]) + "\n")
    pending = sum(row.status is Outcome.PENDING for row in rows)
    print(f"wrote {out / 'gradebook.csv'} and {out / 'summary.md'}", file=sys.stderr)
    if interrupted:
        print(f"interrupted: {pending} not graded yet; the same command again grades them", file=sys.stderr)
        return 130
    return _say_placed(written) if written else 0


def _say_notes(found: list[Submission]) -> None:
    for submission in found:
        for note in submission.notes:
            print(f"{', '.join(submission.students)}: {note}", file=sys.stderr)


def _notes_section(found: list[Submission]) -> list[str]:
    """summary.md's list of submissions put together from several uploads (which file won)."""
    notes = [f"- {markdown_text(', '.join(s.students))}: {markdown_text(note)}"
             for s in found for note in s.notes]
    return ["## Submissions put together from several uploads", "", *notes, ""] if notes else []


def _say_placed(written: lms.Written) -> int:
    """Say on stderr each grade the LMS file cannot place, and whether it was written; the exit status."""
    problems = written.problems()
    for problem in problems:
        print(f"grade-all: {safe_text(problem)}", file=sys.stderr)
    if written.without_submission:
        print(f"{written.path.name}: {len(written.without_submission)} roster students without a submission "
              "(--missing decides their grade; summary.md lists them)", file=sys.stderr)
    if written.refused:
        print(f"grade-all: {written.path.name} NOT written: {len(problems)} grades cannot be placed (above). "
              "Fix them (a roster of this class, grade-all again after --regrade timed_out), or write it "
              "even so with --allow-unplaced (those left out or blank)", file=sys.stderr)
        return UNPLACED
    left = f" with {len(problems)} grades left out or blank (above)" if problems else ""
    print(f"wrote {written.path}{left}", file=sys.stderr)
    return 0


def _similarity(entries: list[Entry], out: Path) -> list:
    from .similarity import compare

    payloads = {student: (entry.job.name, entry.job.data) for entry in entries if entry.job
                for student in entry.submission.students[:1]}  # a group's one submission, once
    return compare(payloads, out / "similarity.html")
