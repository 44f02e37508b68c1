"""The class's grades as the LMS imports them (grader/instructor/lms.py), from rosters laid out as
Canvas' gradebook export (Grades > Export: identity columns, a "Points Possible" row, `Name (id)`
assignment columns, a byte-order mark) and Moodle's plain-text grade export write them."""
import csv
import dataclasses
from pathlib import Path

import pytest

from grader.cli import main as grader_main
from grader.instructor.gradebook import Row
from grader.instructor.lms import Export, RosterError, check, section, write
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


def test_canvas_refuses_grades_it_cannot_place_and_says_each(canvas_roster, tmp_path):
    """mallory is on no roster row and barbara's grading timed out: no canvas.csv (an older one is
    removed), each problem said; the Test Student is left out, never given a 0."""
    (tmp_path / "canvas.csv").write_text("a stale file")
    written = write(rows(), Export("canvas", canvas_roster, "Transformer lab"), tmp_path)
    assert written.refused and not (tmp_path / "canvas.csv").exists()
    assert written.problems() == [
        "mallory_77: in no identity column of the roster: its grade is in no row",
        "Liskov, Barbara (S100: timed_out, ran past 900 s): the grading did not end: blank"]
    assert written.left_out == ["Student, Test (Canvas' Test Student)"]
    text = "\n".join(section(written))
    assert "NOT WRITTEN" in text and "- mallory\\_77: in no identity column" in text
    assert "4 roster students, 4 matched" in text


def test_canvas_keeps_the_identity_columns_and_fills_the_assignment_column(canvas_roster, tmp_path):
    written = write(rows(), Export("canvas", canvas_roster, "Transformer lab", allow_unplaced=True), tmp_path)
    assert not written.refused
    assert read(tmp_path / "canvas.csv") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Transformer lab (4102)"],
        ["    Points Possible", "", "", "", "", "100"],
        ["Lovelace, Ada", "51", "S314", "ada@uni.edu", "CS 101", "87.5"],
        ["Turing, Alan", "52", "S271", "alan@uni.edu", "CS 101", "64"],
        ["Hopper, Grace", "53", "S999", "grace@uni.edu", "CS 102", "0"],  # unreadable: 0
        ["Liskov, Barbara", "54", "S100", "barbara@uni.edu", "CS 102", ""]]  # timed out: not a grade yet
    assert written.unmatched == [("mallory_77", "in no identity column of the roster")]
    assert written.without_submission == []
    assert written.not_graded == ["Liskov, Barbara (S100: timed_out, ran past 900 s)"]


def test_a_timed_out_card_in_part_is_never_a_grade(canvas_roster, tmp_path):
    """A grading that stalled or ran out of time keeps its card (points so far): no total anywhere."""
    row = Row("S100", Outcome.TIMED_OUT, "1 test(s) stalled", card=card(64))
    assert row.total() is None
    written = write([row], Export("canvas", canvas_roster, "Transformer lab", allow_unplaced=True), tmp_path)
    assert [line[-1] for line in read(tmp_path / "canvas.csv")][2:] == ["0", "0", "0", ""]
    assert written.not_graded == ["Liskov, Barbara (S100: timed_out, 1 test(s) stalled)"]


def test_every_cell_is_guarded_against_formulas(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Transformer lab\n"
                      '"=HYPERLINK(""http://x"",""y"")",51,@SUM(A1),+1+1,-2+3,\n')
    write([Row("x_51", Outcome.GRADED, card=card(90), keys=("51",))],
          Export("canvas", roster, "Transformer lab"), tmp_path)
    assert read(tmp_path / "canvas.csv")[2] == ['\'=HYPERLINK("http://x","y")', "51", "'@SUM(A1)", "'+1+1",
                                                "'-2+3", "90"]


def test_a_column_out_of_another_maximum_is_refused_before_grading(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("Student,ID,SIS Login ID,Section,Lab (7)\n    Points Possible,,,,10\n")
    with pytest.raises(RosterError, match="Points Possible in .* is 10, the lab's grades are out of 100"):
        check(Export("canvas", roster, "Lab"))


def test_canvas_new_assignment_column_and_blank_for_missing(canvas_roster, tmp_path):
    write(rows()[:1], Export("canvas", canvas_roster, "Lab 9 autograder", missing="blank"), tmp_path)
    lines = read(tmp_path / "canvas.csv")
    assert lines[0][-1] == "Lab 9 autograder" and lines[1][-1] == "100"
    assert [line[-1] for line in lines[2:]] == ["87.5", "", "", ""]


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
    assert written.refused  # ada's Canvas id is no Moodle email
    allowed = Export("moodle", roster, "Transformer lab", moodle_id="email", allow_unplaced=True)
    written = write(rows(), allowed, tmp_path)
    assert read(tmp_path / "moodle.csv") == [
        ["Email address", "Transformer lab"], ["ada@uni.edu", "0"], ["alan@uni.edu", "64"],
        ["grace@uni.edu", "0"]]
    # ada's Canvas user id is no Moodle email: listed, as are the roster row without an email and mallory
    assert [student for student, _ in written.unmatched] == ["lovelaceada_51", "S100", "mallory_77"]
    assert written.left_out == ["Nobody Emailed"]
    for line in read(tmp_path / "moodle.csv")[1:]:
        float(line[1])  # Moodle aborts the whole import on a grade that is not a number
    write(rows(), dataclasses.replace(allowed, moodle_id="idnumber"), tmp_path)
    assert read(tmp_path / "moodle.csv")[1:] == [["S314", "0"], ["S271", "64"], ["S555", "0"]]
    with pytest.raises(RosterError, match="no column 'Username'"):
        write(rows(), Export("moodle", roster, moodle_id="username"), tmp_path)


WORKSHEET = (  # Moodle's "Download grading worksheet" (View all submissions), as Moodle writes it
    "Identifier,\"Full name\",\"Email address\",Status,Grade,\"Maximum Grade\",\"Grade can be changed\","
    "\"Last modified (submission)\",\"Last modified (grade)\",\"Feedback comments\"\n"
    "\"Participant 1001\",\"Ada Lovelace\",ada@uni.edu,\"Submitted for grading\",,100.00,Yes,"
    "\"Monday, 1 December 2026, 9:00 AM\",-,\n"
    "\"Participant 1002\",\"Alan Turing\",alan@uni.edu,\"No submission\",,100.00,Yes,-,-,\n"
    "\"Participant 1003\",\"=cmd|' /C calc'!A0\",eve@uni.edu,\"Submitted for grading\",,100.00,Yes,-,-,\n")


def test_moodle_grading_worksheet_comes_back_as_it_was_with_the_grades(tmp_path):
    """Matched by Identifier ("Participant N": the download's folder names) or email; every other cell
    as Moodle wrote it (its upload reads Identifier, Grade and Last modified (grade) by name)."""
    roster = tmp_path / "worksheet.csv"
    roster.write_text(WORKSHEET)
    graded = [Row("Ada_Lovelace_1001", Outcome.GRADED, card=card(91.5), keys=("Participant 1001",)),
              Row("eve@uni.edu", Outcome.GRADED, card=card(40))]
    written = write(graded, Export("moodle", roster), tmp_path)
    assert not written.refused and written.without_submission == ["Alan Turing (Participant 1002)"]
    lines = read(tmp_path / "moodle.csv")
    assert lines[0] == ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                        "Grade can be changed", "Last modified (submission)", "Last modified (grade)",
                        "Feedback comments"]
    assert [line[:5] for line in lines[1:]] == [
        ["Participant 1001", "Ada Lovelace", "ada@uni.edu", "Submitted for grading", "91.5"],
        ["Participant 1002", "Alan Turing", "alan@uni.edu", "No submission", "0"],
        ["Participant 1003", "'=cmd|' /C calc'!A0", "eve@uni.edu", "Submitted for grading", "40"]]
    assert lines[1][7:9] == ["Monday, 1 December 2026, 9:00 AM", "-"]
    out_of_10 = tmp_path / "ten.csv"
    out_of_10.write_text(WORKSHEET.replace("100.00", "10.00"))
    with pytest.raises(RosterError, match="Maximum Grade in .* is 10.00"):
        check(Export("moodle", out_of_10))
