"""The class's grades as the LMS imports them (grader/instructor/lms.py), from rosters laid out as
Canvas' gradebook export (Grades > Export: identity columns, a "Points Possible" row, `Name (id)`
assignment columns, a byte-order mark) and Moodle's plain-text grade export write them."""
import csv
from pathlib import Path

import pytest

from grader.cli import main as grader_main
from grader.instructor.gradebook import Row
from grader.instructor.lms import Export, RosterError, section, write
from grader.instructor.runner import Outcome

CANVAS_ROSTER = (
    "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Lab 8 (4101),Transformer lab (4102),"
    "Assignments Current Score,Assignments Final Score,Current Score,Final Score\n"
    "    Points Possible,,,,,10,100,(read only),(read only),(read only),(read only)\n"
    '"Lovelace, Ada",51,S314,ada@uni.edu,CS 101,9,,90.0,90.0,90.0,90.0\n'
    '"Turing, Alan",52,S271,alan@uni.edu,CS 101,8,,80.0,80.0,80.0,80.0\n'
    '"Hopper, Grace",53,S999,grace@uni.edu,CS 102,7,,70.0,70.0,70.0,70.0\n'
    '"Liskov, Barbara",54,S100,barbara@uni.edu,CS 102,,,,,,\n'
    '"Student, Test",99,,a1b2c3d4,CS 101,,,,,,\n')

MOODLE_ROSTER = (
    "First name,Last name,ID number,Institution,Department,Email address,Assignment: Transformer lab (Real),"
    "Last downloaded from this course\n"
    "Ada,Lovelace,S314,,,ada@uni.edu,-,1764590000\n"
    "Alan,Turing,S271,,,alan@uni.edu,-,1764590000\n"
    "Grace,Hopper,,,,grace@uni.edu,-,1764590000\n"
    "Nobody,Emailed,S555,,,,-,1764590000\n")


def card(score: float) -> dict:
    return {"score": score, "max_score": 100.0, "components": {}, "tests": []}


def rows() -> list[Row]:
    """ada from Canvas' file names (her user id), alan from Gradescope's metadata (sid, email), grace an
    unreadable submission named by her login, barbara's grading timed out, and mallory, on no roster."""
    return [Row("lovelaceada_51", Outcome.GRADED, card=card(87.5), keys=("51",)),
            Row("S271", Outcome.GRADED, card=card(64), keys=("S271", "alan@uni.edu", "Alan Turing")),
            Row("grace@uni.edu", Outcome.UNREADABLE, "no exercise file"),
            Row("S100", Outcome.TIMED_OUT, "ran past 900 s"),
            Row("mallory_77", Outcome.GRADED, card=card(100), keys=("77",))]


def read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


@pytest.fixture
def canvas_roster(tmp_path: Path) -> Path:
    path = tmp_path / "canvas_export.csv"
    path.write_text(CANVAS_ROSTER, encoding="utf-8")
    return path


def test_canvas_keeps_the_identity_columns_and_fills_the_assignment_column(canvas_roster, tmp_path):
    written = write(rows(), Export("canvas", canvas_roster, "Transformer lab"), tmp_path)
    assert read(tmp_path / "canvas.csv") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Transformer lab (4102)"],
        ["    Points Possible", "", "", "", "", "100"],
        ["Lovelace, Ada", "51", "S314", "ada@uni.edu", "CS 101", "87.5"],
        ["Turing, Alan", "52", "S271", "alan@uni.edu", "CS 101", "64"],
        ["Hopper, Grace", "53", "S999", "grace@uni.edu", "CS 102", "0"],  # unreadable: 0
        ["Liskov, Barbara", "54", "S100", "barbara@uni.edu", "CS 102", ""],  # timed out: not a grade yet
        ["Student, Test", "99", "", "a1b2c3d4", "CS 101", "0"]]  # no submission: 0
    assert written.unmatched == [("mallory_77", "in no identity column of the roster")]
    assert written.without_submission == ["Student, Test"]
    assert written.not_graded == ["Liskov, Barbara (S100: timed_out)"]
    text = "\n".join(section(written))
    assert "- mallory_77: in no identity column" in text and "5 roster students, 4 matched" in text


def test_canvas_new_assignment_column_and_blank_for_missing(canvas_roster, tmp_path):
    write(rows()[:1], Export("canvas", canvas_roster, "Lab 9 autograder", missing="blank"), tmp_path)
    lines = read(tmp_path / "canvas.csv")
    assert lines[0][-1] == "Lab 9 autograder" and lines[1][-1] == "100"
    assert [line[-1] for line in lines[2:]] == ["87.5", "", "", "", ""]


def test_a_roster_that_canvas_did_not_write_is_refused_before_any_grading(tmp_path, capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text("name,email\nAda,ada@uni.edu\n")
    (tmp_path / "class" / "ada").mkdir(parents=True)
    status = grader_main(["grade-all", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                          "--lms", "canvas", "--roster", str(roster)])
    assert status == 2
    said = capsys.readouterr().err
    assert "not a Canvas gradebook export: no column Student, ID, SIS Login ID, Section" in said
    assert not (tmp_path / "out").exists()
    with pytest.raises(RosterError, match="2 columns"):
        two = tmp_path / "two.csv"
        two.write_text("Student,ID,SIS Login ID,Section,Lab (1),Lab (2)\n")
        write([], Export("canvas", two, "Lab"), tmp_path)


def test_moodle_has_the_identifier_and_numeric_grades_only(tmp_path):
    roster = tmp_path / "moodle_export.csv"
    roster.write_text(MOODLE_ROSTER)
    written = write(rows(), Export("moodle", roster, "Transformer lab", moodle_id="email"), tmp_path)
    assert read(tmp_path / "moodle.csv") == [
        ["Email address", "Transformer lab"], ["ada@uni.edu", "0"], ["alan@uni.edu", "64"],
        ["grace@uni.edu", "0"]]
    # ada's Canvas user id is no Moodle email: listed, as are the roster row without an email and mallory
    assert [student for student, _ in written.unmatched] == ["lovelaceada_51", "S100", "mallory_77"]
    assert written.left_out == ["Nobody Emailed"]
    for line in read(tmp_path / "moodle.csv")[1:]:
        float(line[1])  # Moodle aborts the whole import on a grade that is not a number
    write(rows(), Export("moodle", roster, "Transformer lab", moodle_id="idnumber"), tmp_path)
    assert read(tmp_path / "moodle.csv")[1:] == [["S314", "0"], ["S271", "64"], ["S555", "0"]]
    with pytest.raises(RosterError, match="no column 'Username'"):
        write(rows(), Export("moodle", roster, moodle_id="username"), tmp_path)
