"""A class's grades as a file an LMS imports as it is: Canvas' gradebook CSV or Moodle's grade CSV.

Both start from the roster the instructor exports from the LMS, so that every row names a student
the LMS knows (Moodle aborts a whole import on one unknown user, Canvas matches rows by its identity
columns and makes every other column an assignment):

- Canvas (Grades > Export): the identity columns `Student, ID, SIS User ID, SIS Login ID, Section`
  (and `Integration ID`, `Root Account` where the export has them), a `Points Possible` row, then
  one column per assignment, `Name (id)`. canvas.csv keeps the identity columns and the points row
  and has one assignment column: the roster's column named NAME (with or without its ` (id)`), or a
  new column NAME, which Canvas' import makes a new assignment.
- Moodle (Grade administration > Export > Plain text file): the user fields (`First name, Last name,
  ID number, Institution, Department, Email address`, or a `Username` column) and the grade items.
  moodle.csv has two columns: the identifier the instructor picks (email, idnumber or username: map
  it to that user field on import) and NAME, grades as plain numbers (blank: no grade).

A graded student is matched to the roster row holding one of their keys (their grade-all id, or
what classroom.py read: Canvas' user id from the file names, Gradescope's sid and email) in an
identity column (Canvas: ID, SIS User ID, SIS Login ID, Integration ID; Moodle: the picked one).
Submissions that match no row, or several, and roster students without a submission are listed
(summary.md), never dropped silently.
"""
import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_atomic
from ..spec import COMPONENT_POINTS
from .gradebook import Row

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


@dataclass
class Written:
    """An LMS file written, and who it could not place."""

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
    """Roster rows without the identifier (Moodle would abort the import on them)."""


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
        written.not_graded.append(f"{name} ({row.student}: {row.status.value})")
        return ""
    return _points(total)


def _maximum(rows: list[Row]) -> float:
    cards = [row.card for row in rows if row.card]
    return max((card["max_score"] for card in cards), default=sum(COMPONENT_POINTS.values()))


def _csv(lines: list[list[str]]) -> str:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(lines)
    return text.getvalue()


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
    return identity, named[0] if named else export.assignment, records


def canvas(rows: list[Row], export: Export, out: Path) -> Written:
    """Write `out` (canvas.csv) for Canvas' gradebook import, from the roster Canvas exported."""
    identity, column, records = _canvas_roster(export)
    points = next((r for r in records if r.get("Student", "").strip() == POINTS_POSSIBLE), None)
    students = [r for r in records if r.get("ID", "").strip() and r is not points]
    written = Written(out, len(students))
    placed = _match(rows, _index(students, CANVAS_KEYS), written)
    possible = (points or {}).get(column, "").strip() or _points(_maximum(rows))
    lines = [identity + [column], [f"    {POINTS_POSSIBLE}"] + [""] * (len(identity) - 1) + [possible]]
    for number, record in enumerate(students):
        grade = _grade(number, placed, record["Student"], written, export.missing)
        lines.append([record.get(name, "") for name in identity] + [grade])
    write_atomic(out, _csv(lines))
    return written


def _moodle_roster(export: Export) -> tuple[str, list[dict[str, str]]]:
    """The roster's identifier column and its records."""
    header, *body = _read(export.roster)
    header = [cell.strip() for cell in header]
    column = MOODLE_IDS.get(export.moodle_id)
    if column not in header:
        raise RosterError(f"{export.roster} has no column {column!r} for --moodle-id {export.moodle_id} "
                          f"(its columns: {', '.join(header)})")
    return column, [dict(zip(header, cells, strict=False)) for cells in body]


def moodle(rows: list[Row], export: Export, out: Path) -> Written:
    """Write `out` (moodle.csv) for Moodle's CSV grade import, from the roster Moodle exported."""
    column, records = _moodle_roster(export)
    students = [r for r in records if r.get(column, "").strip()]  # Moodle aborts on a blank identifier
    written = Written(out, len(students))
    written.left_out = [" ".join(r.get(name, "") for name in ("First name", "Last name")).strip() or "?"
                        for r in records if not r.get(column, "").strip()]
    placed = _match(rows, _index(students, (column,)), written)
    lines = [[column, export.assignment]]
    for number, record in enumerate(students):
        lines.append([record[column].strip(), _grade(number, placed, record[column].strip(), written,
                                                       export.missing)])
    write_atomic(out, _csv(lines))
    return written


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
    """DIR/canvas.csv or DIR/moodle.csv. Raises RosterError for a roster the LMS did not write."""
    check(export)
    return (canvas if export.lms == "canvas" else moodle)(list(rows), export, out_dir / f"{export.lms}.csv")


def section(written: Written) -> list[str]:
    """summary.md's account of the LMS file: what is in it, and who could not be placed."""
    lines = ["## LMS gradebook", "",
             f"[{written.path.name}]({written.path.name}): {written.students} roster students, "
             f"{written.matched} matched to a submission.", ""]
    for title, names in (("Submissions matching no roster student (not in the file)",
                          [f"{student}: {why}" for student, why in written.unmatched]),
                         ("Roster students without a submission", written.without_submission),
                         ("Roster students whose grading did not end (blank: grade them again)",
                          written.not_graded),
                         ("Roster rows without the identifier (left out)", written.left_out)):
        if names:
            lines += [f"{title}: {len(names)}", "", *[f"- {name}" for name in names], ""]
    return lines
