"""The synthetic class of `grader rehearse`, made from the project's own material: correct work in every
shape a student hands it in, every bug of the corpus (examples/submissions/bugs.py), the hostile
submissions (hostile.py) and broken files; laid out as the course's LMS exports it (Canvas, Moodle or
Gradescope), with the roster the LMS would give (a student without a submission, a Test Student).
"""

import json
import shutil
import zipfile
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path

from ..spec import COMPONENT_POINTS
from . import hostile
from .classroom import METADATA, MOODLE_PARTICIPANT, student_id
from .corpus import load_bugs
from .lms import ASSIGNMENT, MAXIMUM, TEST_STUDENT

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "submissions" / "correct"
REFERENCE = Path(__file__).resolve().parents[2] / "solutions"
LAYOUTS = ("canvas", "moodle", "gradescope")
REHEARSAL = "rehearsal"
"""`grader rehearse`'s folder by default."""
HOSTILE_FILE = "quiz.py"
"""The file a hostile submission's code runs in (at import): it costs that component, never the rest."""
QUICK_BUGS = 1
"""Bugs per component in a --quick rehearsal (crash bugs left out: they cost their time budget)."""


@dataclass
class Student:
    """One synthetic student: what they hand in (`source`: a folder, a zip, a notebook, a file; None:
    nothing) and what a right deployment must make of it (`kind`, `bug`, `total`)."""

    name: str
    user: str
    kind: str
    source: Path | None
    bug: object = None
    total: float | None = None
    """The exact total expected (None: what the bug's or the hostile submission's check says)."""
    status: str = "graded"
    marker: str = ""
    student: str = ""
    """grade-all's id for them, as the layout names them (classroom.py)."""


@dataclass
class Class:
    """The class as exported: `export` (what grade-all reads), `roster` (None for Gradescope)."""

    layout: str
    export: Path
    roster: Path | None
    students: list[Student]
    absent: str = ""
    """The roster student who submitted nothing."""
    late: list[Student] = field(default_factory=list)


def _zip(files: dict[str, bytes], target: Path) -> Path:
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return target


def _example(extra: dict[str, str] | None = None) -> dict[str, bytes]:
    files = {path.name: path.read_bytes() for path in sorted(EXAMPLE.glob("*.py"))}
    return files | {name: text.encode() for name, text in (extra or {}).items()}


def _folder(files: dict[str, bytes], target: Path) -> Path:
    target.mkdir(parents=True)
    for name, data in files.items():
        (target / name).write_bytes(data)
    return target


def _notebook(files: dict[str, bytes], target: Path) -> Path:
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": f"%%writefile {name}\n{data.decode()}",
        }
        for name, data in files.items()
    ]
    target.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return target


def _correct(material: Path) -> list[tuple[str, Path, float, str]]:
    """(kind, source, total, status) of correct work and broken files, each in its own shape."""
    files = _example()
    reference = {
        path.name: path.read_bytes() for path in sorted(REFERENCE.glob("*.py")) if path.name != "__init__.py"
    }
    return [
        ("correct folder", _folder(files, material / "correct"), MAXIMUM, "graded"),
        (
            "reference (another correct variant)",
            _folder(reference, material / "reference"),
            MAXIMUM,
            "graded",
        ),
        ("correct zip", _zip(files, material / "correct.zip"), MAXIMUM, "graded"),
        (
            "nested folder zip",
            _zip({f"lab9/{n}": d for n, d in files.items()}, material / "nested.zip"),
            MAXIMUM,
            "graded",
        ),
        (
            "__MACOSX junk",
            _zip(files | {f"__MACOSX/._{n}": b"\0\5\26\7" for n in files}, material / "macosx.zip"),
            MAXIMUM,
            "graded",
        ),
        (
            "Windows zip",
            _zip({f"lab9\\{n}": d for n, d in files.items()}, material / "windows.zip"),
            MAXIMUM,
            "graded",
        ),
        ("notebook of %%writefile cells", _notebook(files, material / "lab.ipynb"), MAXIMUM, "graded"),
        (
            "lone file",
            _folder({"quiz.py": files["quiz.py"]}, material / "lone"),
            COMPONENT_POINTS["quiz"],
            "graded",
        ),
        ("empty zip", _zip({}, material / "empty.zip"), 0.0, "empty"),
        (
            "corrupt zip",
            _write(material / "corrupt.zip", _zip(files, material / "whole.zip").read_bytes()[:999]),
            0.0,
            "unreadable",
        ),
    ]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _bugs(material: Path, *, quick: bool) -> list[tuple[object, Path]]:
    corpus = load_bugs()
    bugs = [bug for bug in corpus.BUGS if not (quick and bug.crash)]
    if quick:
        bugs = [bug for n, bug in enumerate(bugs) if bug.component not in {b.component for b in bugs[:n]}]
        bugs = bugs[: len(COMPONENT_POINTS) * QUICK_BUGS]
    return [(bug, corpus.materialize(bug, material / "bugs")) for bug in bugs]


def _hostile(material: Path) -> list[tuple[str, Path, str]]:
    """(kind, source, marker): an escape of processes, then an earlier student's secret and a later
    student's scan for it (the scan goes last in the class)."""
    escape, secret = hostile.fresh_marker(), hostile.carryover_marker()
    code = {
        "escaping processes": ("import os, subprocess\n" + hostile.escape_code(escape), escape),
        "earlier student's secret": (hostile.raising_code(secret), secret),
        "later student's scan": (hostile.carryover_scan_code(secret), secret),
    }
    return [
        (
            kind,
            _folder(_example({HOSTILE_FILE: text}), material / kind.replace(" ", "_").replace("'", "")),
            marker,
        )
        for kind, (text, marker) in code.items()
    ]


def material(scratch: Path, *, quick: bool = False, size: int | None = None) -> list[Student]:
    """The class's students, in the order they are graded: the earlier student's secret first, its scan
    last; `size` repeats the bugs under fresh names until there are that many submissions."""
    scratch.mkdir(parents=True, exist_ok=True)
    hostiles = _hostile(scratch)
    students = [Student("", "", kind, source, marker=marker) for kind, source, marker in hostiles[1:2]]
    students += [
        Student("", "", kind, source, total=total, status=status)
        for kind, source, total, status in _correct(scratch)
    ]
    bugs = _bugs(scratch, quick=quick)
    students += [Student("", "", "bug", source, bug=bug) for bug, source in bugs]
    students.append(Student("", "", hostiles[0][0], hostiles[0][1], marker=hostiles[0][2]))
    repeats = cycle(bugs)
    while size and len(students) + 1 < size:
        bug, source = next(repeats)
        students.append(Student("", "", "bug", source, bug=bug))
    students.append(Student("", "", hostiles[2][0], hostiles[2][1], marker=hostiles[2][2]))
    for number, student in enumerate(students):
        student.name, student.user = f"s{number:04d}", str(5000 + number)
    return students


def _uploads(source: Path) -> dict[str, bytes]:
    """The files a student uploads: a folder's files, else the one file."""
    if source.is_dir():
        return {path.name: path.read_bytes() for path in sorted(source.iterdir()) if path.is_file()}
    return {source.name: source.read_bytes()}


def _canvas(students: list[Student], export: Path, roster: Path, absent: Student) -> None:
    lines = [
        f"Student,ID,SIS User ID,SIS Login ID,Section,{ASSIGNMENT}",
        f"    Points Possible,,,,,{MAXIMUM:g}",
    ]
    for number, student in enumerate(students):
        late = ("", "late_", "LATE_")[number % 3]
        for name, data in _uploads(student.source).items():
            (export / f"{student.name}_{late}{student.user}_{9000 + number}_{name}").write_bytes(data)
        student.student = student_id(f"{student.name}_{student.user}")
    for student in [*students, absent]:
        lines.append(f'"{student.name}, Ada",{student.user},S{student.user},{student.name}@uni.edu,A,')
    lines.append(f'"{TEST_STUDENT[0]}",99,,a1b2c3,A,')
    roster.write_text("\n".join(lines) + "\n")


def _moodle(students: list[Student], export: Path, roster: Path, absent: Student) -> None:
    lines = [
        'Identifier,"Full name","Email address",Status,Grade,"Maximum Grade","Grade can be changed",'
        '"Last modified (submission)","Last modified (grade)","Feedback comments"'
    ]
    for student in students:
        folder = export / f"{student.name} Ada_{student.user}_assignsubmission_file_"
        _folder(_uploads(student.source), folder)
        student.student = student_id(f"{student.name} Ada_{student.user}")
    for student in [*students, absent]:
        lines.append(
            f'"{MOODLE_PARTICIPANT}{student.user}","{student.name} Ada",{student.name}@uni.edu,'
            f'"Submitted for grading",,{MAXIMUM:.2f},Yes,-,-,'
        )
    roster.write_text("\n".join(lines) + "\n")


def _gradescope(students: list[Student], export: Path) -> None:
    metadata = {}
    for student in students:
        folder = f"submission_{student.user}"
        _folder(_uploads(student.source), export / folder)
        metadata[folder] = {
            ":submitters": [
                {":name": f"{student.name} Ada", ":sid": student.user, ":email": f"{student.name}@uni.edu"}
            ]
        }
        student.student = student_id(student.user)
    (export / METADATA).write_text(json.dumps(metadata, indent=1))  # JSON is YAML


def build(out: Path, layout: str = LAYOUTS[0], *, quick: bool = False, size: int | None = None) -> Class:
    """The class in `layout`'s export under out/class, its roster out/roster.csv (Canvas, Moodle)."""
    students = material(out / "material", quick=quick, size=size)
    absent = Student(f"s{len(students):04d}", str(5000 + len(students)), "no submission", None)
    export, roster = out / "class", out / "roster.csv"
    shutil.rmtree(export, ignore_errors=True)
    export.mkdir(parents=True)
    if layout == "gradescope":
        _gradescope(students, export)
        return Class(layout, export, None, students)
    (_canvas if layout == "canvas" else _moodle)(students, export, roster, absent)
    return Class(layout, export, roster, students, absent.name)


def resubmit(klass: Class, count: int = 2) -> list[Student]:
    """The late round: the first `count` students with a bug upload the correct files again (Canvas: a
    newer upload, `_LATE_`; Moodle and Gradescope: their folder replaced); they are now expected 100."""
    late = [student for student in klass.students if student.bug][:count]
    for number, student in enumerate(late):
        files = _example()
        if klass.layout == "canvas":
            for name, data in files.items():
                (klass.export / f"{student.name}_LATE_{student.user}_{20000 + number}_{name}").write_bytes(
                    data
                )
        else:
            folder = next(klass.export.glob(f"*{student.user}*"))
            shutil.rmtree(folder)
            _folder(files, folder)
        student.kind, student.bug, student.total, student.source = (
            "resubmitted correct",
            None,
            MAXIMUM,
            EXAMPLE,
        )
    klass.late = late
    return late
