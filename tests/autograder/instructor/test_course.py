"""A course, end to end, as an instructor meets it the night grades are due (issue 30): a Canvas
export with `_late_` and `_LATE_` names, a resubmitted file, an oversized entry, formula names on the
roster, Canvas' Test Student, a timed-out and a stalled grading, a student without a submission and
one on no roster row; then Moodle's Download all submissions with its grading worksheet. Every LMS
total is its own student's final total, nothing that cannot be placed is silent, and no hidden input
reaches any output a student sees (feedback pages, the bulk upload, the LMS file, Gradescope's
results.json at every visibility).

Two submissions are graded for real (the correct example and a bug); the timed-out and stalled
gradings are given as the runner reports them, since a loaded machine cannot be ordered up."""
import csv
import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from grader.instructor import classroom, runner
from grader.instructor import grade_all as grade_all_module
from grader.instructor.grade_all import UNPLACED, grade_all
from grader.instructor.gradescope import VISIBILITIES, results
from grader.instructor.lms import Export
from grader.spec import Status
from grader.suites import all_cases
from helpers import EXAMPLES, load_bugs

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.xdist_group("grade_all")]

ROSTER = ("Student,ID,SIS User ID,SIS Login ID,Section,Transformer lab (4102)\n"
          "    Points Possible,,,,,100\n"
          '"Lovelace, Ada",51,S51,ada@uni.edu,A,\n'
          '"Babbage, Bob",52,S52,bob@uni.edu,A,\n'
          '"Curie, Carol",53,S53,carol@uni.edu,A,\n'
          '"Erin, Erin",54,S54,erin@uni.edu,A,\n'
          '"Frank, Frank",55,S55,frank@uni.edu,A,\n'
          '"=HYPERLINK(""http://evil"",""x"")",56,S56,@SUM(1),A,\n'
          '"Hopper, Grace",57,S57,grace@uni.edu,A,\n'
          '"Student, Test",99,,a1b2c3,A,\n')
WORKSHEET = ('Identifier,"Full name","Email address",Status,Grade,"Maximum Grade","Grade can be changed",'
             '"Last modified (submission)","Last modified (grade)","Feedback comments"\n'
             '"Participant 2001","Ada Lovelace",ada@uni.edu,"Submitted for grading",,100.00,Yes,-,-,\n'
             '"Participant 2002","Erin Erin",erin@uni.edu,"Submitted for grading",,100.00,Yes,-,-,\n'
             '"Participant 2003","Grace Hopper",grace@uni.edu,"No submission",,100.00,Yes,-,-,\n')


def _stalled_card() -> dict:
    return {"score": 30.0, "max_score": 100.0, "components": {"quiz": {"score": 0.0, "max_score": 5.0}},
            "tests": [{"name": "quiz_answers", "component": "quiz", "score": 0.0, "max_score": 5.0,
                       "status": Status.STALLED.value, "message": "no answer within 40 s",
                       "visibility": "hidden"}]}


@pytest.fixture
def fake_load(monkeypatch):
    """erin's grading runs past its backstop, frank's stalls (a card in part, 30 points so far); the
    others are graded for real, once per distinct submission (a Moodle copy reuses its Canvas twin's)."""
    graded: dict[str, dict] = {}

    def grade_jobs(jobs, workers, scheduler=None, security=None):
        real, given = [], set()
        for index, job in enumerate(jobs):
            if job.name.startswith(("erin", "Erin")):
                given.add(index)
                yield index, runner._result(runner.Outcome.TIMED_OUT, "grading ran past 900 s")
            elif job.name.startswith("frank"):
                given.add(index)
                yield index, runner._graded(_stalled_card(), 1.0)
            elif hashlib.sha256(job.data).hexdigest() not in graded:
                real.append(index)
        for index, result in runner.grade_jobs([jobs[i] for i in real], workers):
            graded[hashlib.sha256(jobs[real[index]].data).hexdigest()] = result
        for index, job in enumerate(jobs):
            if index not in given:
                yield index, graded[hashlib.sha256(job.data).hexdigest()]

    monkeypatch.setattr(grade_all_module, "grade_jobs", grade_jobs)
    monkeypatch.setattr(classroom, "MAX_ZIP_BYTES", 64 << 10)  # carol's 100 KiB file is over the cap


def _canvas_export(tmp_path: Path) -> Path:
    bugs = load_bugs()
    bug = bugs.materialize(bugs.BY_NAME["ffn_dropout_in_eval_mode"], tmp_path / "bug")
    export = tmp_path / "submissions.zip"
    with zipfile.ZipFile(export, "w") as archive:
        for path in sorted(EXAMPLES.joinpath("correct").glob("*.py")):
            archive.write(path, f"lovelaceada_late_51_9001_{path.name}")
        for path in sorted(Path(bug).glob("*.py")):
            archive.write(path, f"babbagebob_LATE_52_9999_{path.name}")
        archive.writestr("babbagebob_52_10000_trainer-1.py", (Path(bug) / "trainer.py").read_text())
        archive.writestr("curiecarol_53_9003_model.py", "#" * (100 << 10))
        archive.writestr("erinerin_54_9004_quiz.py", "ANSWERS = {}\n")
        archive.writestr("frankfrank_55_9005_quiz.py", "ANSWERS = {'q1': 1}\n")
        archive.writestr("hyperlinkx_56_9006_quiz.py", "")
        archive.writestr("mallory_77_9007_quiz.py", "ANSWERS = {}\n")
    return export


def _lms_column(path: Path) -> dict[str, str]:
    with open(path, newline="") as file:
        return {line[1]: line[-1] for line in list(csv.reader(file))[2:]}


def _totals(out: Path) -> dict[str, str]:
    with open(out / "gradebook.csv", newline="") as file:
        return {line["student"]: line["total"] for line in csv.DictReader(file)}


def test_a_course_every_lms_total_is_its_own_students_and_nothing_unplaced_is_silent(tmp_path, fake_load,
                                                                                       capsys):
    export, roster, out = _canvas_export(tmp_path), tmp_path / "roster.csv", tmp_path / "out"
    roster.write_text(ROSTER)
    assert grade_all(export, out, workers=2, export=Export("canvas", roster), feedback="full") == UNPLACED
    said = capsys.readouterr().err
    assert not (out / "canvas.csv").exists()
    for problem in ("mallory_77: in no identity column", "Erin, Erin (erinerin_54: timed_out",
                    "Frank, Frank (frankfrank_55: timed_out, 1 test(s) stalled", "canvas.csv NOT written"):
        assert problem in said, said
    assert "babbagebob_52: files of 2 uploads (9999, 10000) merged" in said
    assert "trainer.py from 10000" in said

    allowed = Export("canvas", roster, allow_unplaced=True)
    assert grade_all(export, out, workers=2, export=allowed, feedback="full") == 0
    totals, column = _totals(out), _lms_column(out / "canvas.csv")
    students = {"51": "lovelaceada_51", "52": "babbagebob_52", "53": "curiecarol_53", "54": "erinerin_54",
                "55": "frankfrank_55", "56": "hyperlinkx_56"}
    assert set(column) == {*students, "57"}  # the Test Student is left out
    for user, student in students.items():
        assert column[user] == totals[student], student  # the LMS total is its own student's final total
    assert totals["lovelaceada_51"] == "100" and float(totals["babbagebob_52"]) < 100
    assert column["53"] == column["56"] == column["57"] == "0" and column["54"] == column["55"] == ""
    curie = json.loads((out / ".grade-all-state.json").read_text())["curiecarol_53"]
    assert curie["status"] == "unreadable" and "larger than the cap of 65536 bytes" in curie["message"]
    with open(out / "canvas.csv", newline="") as file:
        assert "'=HYPERLINK" in file.read()

    summary = (out / "summary.md").read_text()
    assert "Submissions put together from several uploads" in summary and "erinerin" in summary
    _no_hidden_input_reaches_a_student(out)


def _no_hidden_input_reaches_a_student(out: Path) -> None:
    """Grep every student-facing output for the hidden tests' drawn inputs (their seeds and values)."""
    card = json.loads((out / "babbagebob_52.json").read_text())
    inputs = [m for t in card["tests"] if t["visibility"] != "public"
              for m in re.findall(r"\[input: ([^\]]+)", t["message"])]
    assert inputs, "the bug should fail a hidden test on a drawn input"
    secrets = {*inputs, *(s for i in inputs for s in re.findall(r"seed=(\d{6,})", i))}  # seed=1: no secret
    texts = [path.read_text() for path in (out / "feedback").glob("*.*") if path.suffix in (".md", ".html")]
    with zipfile.ZipFile(out / "feedback" / "lms_upload.zip") as upload:
        assert sorted(upload.namelist()) == [
            "babbagebob_52_10000_feedback.html", "curiecarol_53_9003_feedback.html",
            "hyperlinkx_56_9006_feedback.html", "lovelaceada_51_9001_feedback.html",
            "mallory_77_9007_feedback.html"]  # no roster row: Canvas ignores it
        texts += [upload.read(name).decode() for name in upload.namelist()]
    texts.append((out / "canvas.csv").read_text())
    texts += [json.dumps(results(card, all_cases(), hidden_visibility=v)) for v in VISIBILITIES]
    leaks = [secret for secret in secrets for text in texts if secret in text]
    assert not leaks


def test_moodle_download_all_submissions_and_its_grading_worksheet(tmp_path, fake_load, capsys):
    export, worksheet, out = tmp_path / "moodle", tmp_path / "worksheet.csv", tmp_path / "out"
    shutil.copytree(EXAMPLES / "correct", export / "Ada Lovelace_2001_assignsubmission_file_",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (export / "Erin Erin_2002_assignsubmission_file_quiz.py").write_text("ANSWERS = {}\n")
    worksheet.write_text(WORKSHEET)
    lms = Export("moodle", worksheet, allow_unplaced=True)
    assert grade_all(export, out, workers=2, export=lms, feedback="score") == 0
    with open(out / "moodle.csv", newline="") as file:
        lines = list(csv.reader(file))
    assert lines[0] == next(csv.reader([WORKSHEET.splitlines()[0]]))  # the worksheet's own header
    assert [(line[0], line[4]) for line in lines[1:]] == [
        ("Participant 2001", _totals(out)["Ada_Lovelace_2001"]), ("Participant 2002", ""),
        ("Participant 2003", "0")]
    assert "Erin Erin (Participant 2002) (Erin_Erin_2002: timed_out" in capsys.readouterr().err
    with zipfile.ZipFile(out / "feedback" / "lms_upload.zip") as upload:
        assert upload.namelist() == ["Ada Lovelace_2001_assignsubmission_file_/feedback.html"]
