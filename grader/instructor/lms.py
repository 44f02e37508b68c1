"""A class's grades as a file an LMS imports as it is: Canvas' gradebook CSV, Moodle's assignment
grading worksheet or Moodle's grade CSV.

Both start from the roster the instructor exports from the LMS, so that every row names a student
the LMS knows (Moodle aborts a whole import on one unknown user, Canvas matches rows by its identity
columns and makes every other column an assignment):

- Canvas (Grades > Export): the identity columns `Student, ID, SIS User ID, SIS Login ID, Section`
  (and `Integration ID`, `Root Account` where the export has them), a `Points Possible` row, then
  one column per assignment, `Name (id)`. canvas.csv keeps the identity columns and the points row
  and has one assignment column: the roster's column named NAME (with or without its ` (id)`), or a
  new column NAME, which Canvas' import makes a new assignment.
  Canvas' Test Student (the student view's user, "Student, Test") is left out: a grade for it is noise.
- Moodle's assignment, as its courses use it (View all submissions > Download grading worksheet, with
  "Offline grading worksheet" on): the columns `Identifier` ("Participant 12345", the number in the
  folder names of "Download all submissions"), `Full name`, `Email address`, `Status`, `Grade`,
  `Maximum Grade`, ..., `Last modified (grade)`. moodle.csv is that worksheet, every column and row
  as it was, with `Grade` filled in: Moodle's "Upload grading worksheet" reads `Identifier`, `Grade`
  and `Last modified (grade)` by those names (mod/assign/feedback/offline/importgradeslib.php), skips
  a blank grade, and skips a grade newer in Moodle than the worksheet's date (so it is kept as it was).
- Moodle's gradebook (Grade administration > Export > Plain text file): the user fields (`First name,
  Last name, ID number, Institution, Department, Email address`, or a `Username` column) and the grade
  items. moodle.csv has two columns: the identifier the instructor picks (email, idnumber or username:
  map it to that user field on import) and NAME, grades as plain numbers (blank: no grade).

A graded student is matched to the roster row holding one of their keys (their grade-all id, or
what classroom.py read: Canvas' user id from the file names, Gradescope's sid and email) in an
identity column (Canvas: ID, SIS User ID, SIS Login ID, Integration ID; Moodle: the picked one).

A grade that cannot be placed is an error (Written.problems): a submission matching no roster row
(or several), a grading that did not end (its row would be blank), the LMS's points possible other
than the grade's maximum. The file is then not written unless the instructor allows it
(Export.allow_unplaced), and grade-all says each on stderr; roster students without a submission get
--missing's grade and are listed. Every cell goes through gradebook.guarded (no formula).
"""
import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_atomic
from ..results import markdown_text
from ..spec import COMPONENT_POINTS
from .classroom import MOODLE_PARTICIPANT
from .gradebook import Row, csv_text

LMS = ("canvas", "moodle")
MISSING = ("zero", "blank")
"""A roster student without a submission: 0 (the default), or blank (no grade: the LMS keeps what it has)."""
ASSIGNMENT = "Transformer lab"
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Integration ID", "Root Account",
                   "Section")
CANVAS_REQUIRED = ("Student", "ID", "SIS Login ID", "Section")
CANVAS_KEYS = ("ID", "SIS User ID", "SIS Login ID", "Integration ID")
POINTS_POSSIBLE = "Points Possible"
MOODLE_IDS = {"email": "Email address", "idnumber": "ID number", "username": "Username"}
WORKSHEET = ("Identifier", "Grade", "Last modified (grade)")
"""The columns by which Moodle's "Upload grading worksheet" finds the participant, grade and date."""
WORKSHEET_KEYS = ("Identifier", "Email address")
WORKSHEET_MAXIMUM = "Maximum Grade"
TEST_STUDENT = ("Student, Test", "Test Student")
"""How Canvas' export names the course's Test Student (the student view's user)."""
MAXIMUM = sum(COMPONENT_POINTS.values())
_CANVAS_ID = re.compile(r"\s*\(\d+\)$")  # "Lab 9 (12345)": the assignment's Canvas id


class RosterError(ValueError):
    """The roster cannot be read as the LMS exports it."""


@dataclass(frozen=True)
class Export:
    """What to write: `lms` (canvas or moodle), from `roster`, into the column `assignment`."""

    lms: str
    roster: Path
    assignment: str = ASSIGNMENT
    missing: str = "zero"
    moodle_id: str = "email"
    allow_unplaced: bool = False
    """Write the file even with grades that cannot be placed (left out, or blank), each listed."""


@dataclass
class Written:
    """An LMS file (written unless `refused`), and who it could not place."""

    path: Path
    students: int = 0
    matched: int = 0
    unmatched: list[tuple[str, str]] = field(default_factory=list)
    """Submissions not in the file: (student, why)."""
    without_submission: list[str] = field(default_factory=list)
    """Roster students no submission matched (0 or blank in the file)."""
    not_graded: list[str] = field(default_factory=list)
    """Roster students whose grading did not end (timed out, error, pending): blank in the file."""
    left_out: list[str] = field(default_factory=list)
    """Roster rows not in the file: without the identifier (Moodle would abort the import on them),
    Canvas' Test Student."""
    refused: bool = False

    def problems(self) -> list[str]:
        """Each grade that cannot be placed, with why: an error unless the instructor allows them."""
        return ([f"{student}: {why}: its grade is in no row" for student, why in self.unmatched]
                + [f"{name}: the grading did not end: blank" for name in self.not_graded])


def _read(path: Path) -> list[list[str]]:
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # Excel and Canvas write a BOM
    except (OSError, UnicodeDecodeError) as error:
        raise RosterError(f"cannot read the roster {path}: {error}") from error
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if not rows:
        raise RosterError(f"the roster {path} is empty")
    return rows


def _key(value: str) -> str:
    return value.strip().casefold()


def _index(records: list[dict[str, str]], columns: tuple[str, ...]) -> dict[str, set[int]]:
    """Each identity value (casefolded) -> the roster rows holding it."""
    index: dict[str, set[int]] = {}
    for number, record in enumerate(records):
        for column in columns:
            if record.get(column, "").strip():
                index.setdefault(_key(record[column]), set()).add(number)
    return index


def _match(rows: list[Row], index: dict[str, set[int]], written: Written) -> dict[int, Row]:
    """Roster row number -> the gradebook row placed there; the others go to written.unmatched."""
    placed: dict[int, Row] = {}
    for row in rows:
        found = set().union(*(index.get(_key(key), set()) for key in (row.student, *row.keys)))
        if len(found) > 1:
            written.unmatched.append((row.student, f"matches {len(found)} roster students"))
        elif not found:
            written.unmatched.append((row.student, "in no identity column of the roster"))
        elif (number := found.pop()) in placed:
            written.unmatched.append((row.student, f"the same roster student as {placed[number].student}"))
        else:
            placed[number] = row
    written.matched = len(placed)
    return placed


def _points(x: float) -> str:
    return f"{x:g}"


def _grade(number: int, placed: dict[int, Row], name: str, written: Written, missing: str) -> str:
    row = placed.get(number)
    if row is None:
        written.without_submission.append(name)
        return "0" if missing == "zero" else ""
    total = row.total()
    if total is None:
        why = " ".join(row.message.split())[:120] or "no grade yet"
        written.not_graded.append(f"{name} ({row.student}: {row.status.value}, {why})")
        return ""
    return _points(total)


def _same_maximum(possible: str, where: str) -> None:
    """RosterError unless the LMS's points possible (blank: not set) are the grade's maximum: a grade
    out of 100 in a column out of 10 would be another grade than the student's."""
    try:
        differs = bool(possible.strip()) and float(possible) != MAXIMUM
    except ValueError:
        differs = False  # "(read only)" and the like: not a number Canvas or Moodle grades against
    if differs:
        raise RosterError(f"{where} is {possible.strip()}, the lab's grades are out of {MAXIMUM:g}: set the "
                          f"LMS's maximum to {MAXIMUM:g}, or --assignment another column")


def _finish(written: Written, lines: list[list[str]], export: Export) -> Written:
    """Write the file, unless a grade cannot be placed and the instructor did not allow it (then
    remove an older one: importing it would import stale grades)."""
    written.refused = bool(written.problems()) and not export.allow_unplaced
    if written.refused:
        written.path.unlink(missing_ok=True)
    else:
        write_atomic(written.path, csv_text(lines))
    return written


def _canvas_roster(export: Export) -> tuple[list[str], str, list[dict[str, str]]]:
    """The roster's identity columns, the assignment column and its records."""
    header, *body = _read(export.roster)
    header = [cell.strip() for cell in header]
    absent = [name for name in CANVAS_REQUIRED if name not in header]
    if absent:
        raise RosterError(f"{export.roster} is not a Canvas gradebook export: no column {', '.join(absent)} "
                          "(Grades > Export in Canvas)")
    named = [name for name in header if name not in CANVAS_IDENTITY
             and export.assignment in (name, _CANVAS_ID.sub("", name))]
    if len(named) > 1:
        raise RosterError(f"{len(named)} columns of {export.roster} are named {export.assignment!r}: "
                          "--assignment with the column's full name, id included")
    identity = [name for name in header if name in CANVAS_IDENTITY]
    records = [dict(zip(header, cells, strict=False)) for cells in body]
    column = named[0] if named else export.assignment
    points = next((r for r in records if r.get("Student", "").strip() == POINTS_POSSIBLE), {})
    _same_maximum(points.get(column, ""), f"{column!r}'s Points Possible in {export.roster}")
    return identity, column, records


def canvas(rows: list[Row], export: Export, out: Path) -> Written:
    """Write `out` (canvas.csv) for Canvas' gradebook import, from the roster Canvas exported."""
    identity, column, records = _canvas_roster(export)
    points = next((r for r in records if r.get("Student", "").strip() == POINTS_POSSIBLE), None)
    students = [r for r in records if r.get("ID", "").strip() and r is not points
                and r.get("Student", "").strip() not in TEST_STUDENT]
    written = Written(out, len(students))
    written.left_out = [f"{r['Student'].strip()} (Canvas' Test Student)" for r in records
                        if r.get("Student", "").strip() in TEST_STUDENT]
    placed = _match(rows, _index(students, CANVAS_KEYS), written)
    possible = (points or {}).get(column, "").strip() or _points(MAXIMUM)
    lines = [identity + [column], [f"    {POINTS_POSSIBLE}"] + [""] * (len(identity) - 1) + [possible]]
    for number, record in enumerate(students):
        grade = _grade(number, placed, record["Student"], written, export.missing)
        lines.append([record.get(name, "") for name in identity] + [grade])
    return _finish(written, lines, export)


def _moodle_roster(export: Export) -> tuple[list[str], str, list[dict[str, str]]]:
    """The roster's header, its identifier column (Identifier for a grading worksheet) and records."""
    header, *body = _read(export.roster)
    header = [cell.strip() for cell in header]
    records = [dict(zip(header, cells, strict=False)) for cells in body]
    if WORKSHEET[0] in header:
        absent = [name for name in WORKSHEET if name not in header]
        if absent:
            raise RosterError(f"{export.roster} is not Moodle's grading worksheet: no column "
                              f"{', '.join(absent)} (View all submissions > Download grading worksheet)")
        for maximum in {r.get(WORKSHEET_MAXIMUM, "") for r in records}:
            _same_maximum(maximum, f"the assignment's {WORKSHEET_MAXIMUM} in {export.roster}")
        return header, WORKSHEET[0], records
    column = MOODLE_IDS.get(export.moodle_id)
    if column not in header:
        raise RosterError(f"{export.roster} has no column {column!r} for --moodle-id {export.moodle_id} "
                          f"(its columns: {', '.join(header)}); Moodle's grading worksheet (View all "
                          "submissions > Download grading worksheet) matches every participant")
    return header, column, records


def moodle(rows: list[Row], export: Export, out: Path) -> Written:
    """Write `out` (moodle.csv) for Moodle's grading worksheet upload (or its CSV grade import), from
    the worksheet (or roster) Moodle exported."""
    header, column, records = _moodle_roster(export)
    if column == WORKSHEET[0]:
        return _worksheet(rows, export, out, header, records)
    students = [r for r in records if r.get(column, "").strip()]  # Moodle aborts on a blank identifier
    written = Written(out, len(students))
    written.left_out = [" ".join(r.get(name, "") for name in ("First name", "Last name")).strip() or "?"
                        for r in records if not r.get(column, "").strip()]
    placed = _match(rows, _index(students, (column,)), written)
    lines = [[column, export.assignment]]
    for number, record in enumerate(students):
        lines.append([record[column].strip(), _grade(number, placed, record[column].strip(), written,
                                                       export.missing)])
    return _finish(written, lines, export)


def _worksheet(rows: list[Row], export: Export, out: Path, header: list[str],
               records: list[dict[str, str]]) -> Written:
    """The grading worksheet as it was, `Grade` filled in; a row is matched by its Identifier
    ("Participant N", as the download's folder names it) or its email address."""
    students = [r for r in records if r.get(WORKSHEET[0], "").strip().startswith(MOODLE_PARTICIPANT)]
    written = Written(out, len(students))
    written.left_out = [r.get(WORKSHEET[0], "").strip() or "?" for r in records if r not in students]
    placed = _match(rows, _index(students, WORKSHEET_KEYS), written)
    lines = [header]
    for number, record in enumerate(students):
        name = f"{record.get('Full name', '').strip()} ({record[WORKSHEET[0]].strip()})"
        record = {**record, WORKSHEET[1]: _grade(number, placed, name, written, export.missing)}
        lines.append([record.get(cell, "") for cell in header])
    return _finish(written, lines, export)


def check(export: Export) -> None:
    """Raise RosterError now, before any grading, for options or a roster the export cannot use."""
    if export.lms not in LMS:
        raise RosterError(f"--lms {export.lms}: one of {', '.join(LMS)}")
    if export.missing not in MISSING:
        raise RosterError(f"--missing {export.missing}: one of {', '.join(MISSING)}")
    if export.moodle_id not in MOODLE_IDS:
        raise RosterError(f"--moodle-id {export.moodle_id}: one of {', '.join(MOODLE_IDS)}")
    (_canvas_roster if export.lms == "canvas" else _moodle_roster)(export)


def write(rows: list[Row], export: Export, out_dir: Path) -> Written:
    """DIR/canvas.csv or DIR/moodle.csv (not written, and `refused`, where a grade cannot be placed and
    export.allow_unplaced is not set). Raises RosterError for a roster the LMS did not write."""
    check(export)
    return (canvas if export.lms == "canvas" else moodle)(list(rows), export, out_dir / f"{export.lms}.csv")


def section(written: Written) -> list[str]:
    """summary.md's account of the LMS file: what is in it, and who could not be placed."""
    state = ("NOT WRITTEN: grades that cannot be placed (below; --allow-unplaced writes it even so)"
             if written.refused else f"[{written.path.name}]({written.path.name})")
    lines = ["## LMS gradebook", "",
             f"{state}: {written.students} roster students, {written.matched} matched to a submission.", ""]
    for title, names in (("Submissions matching no roster student (not in the file)",
                          [f"{student}: {why}" for student, why in written.unmatched]),
                         ("Roster students without a submission", written.without_submission),
                         ("Roster students whose grading did not end (blank: grade them again)",
                          written.not_graded),
                         ("Roster rows left out", written.left_out)):
        if names:
            lines += [f"{title}: {len(names)}", "", *[f"- {markdown_text(name)}" for name in names], ""]
    return lines
