"""Input that cannot break a run (issue 18): special files never opened, any file name or id a row or a
named refusal, every zip error `unreadable`, bounded metadata, a gradebook no spreadsheet runs.

One test per attack; all cheap (none grades a submission: what they feed grade-all is refused before).
"""
import csv
import io
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.instructor.classroom import MAX_ALIASES, METADATA, ClassError, discover
from grader.instructor.runner import MAX_PAYLOAD_BYTES, Unreadable, payload
from grader.sandbox.client import Sandbox
from grader.submission import MAX_ZIP_BYTES, SubmissionError, special_files, unpack
from helpers import EXAMPLES

CORRECT = EXAMPLES / "correct"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="making a device file needs root")


def _zero_device(path: Path) -> None:
    """A character device that reads zeros for ever (what extracting a tarball as root can create)."""
    os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))


def _grade_all(folder: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader.cli", "grade-all", str(folder), "--out", str(out),
                           "--jobs", "1"], capture_output=True, text=True, timeout=120)


def _gradebook(out: Path) -> dict[str, list[str]]:
    with open(out / "gradebook.csv", newline="") as file:
        return {row[0]: row for row in csv.reader(file)}


# -- special files: never opened ---------------------------------------------------------------------
def test_a_fifo_given_as_the_submission_is_refused_unopened(tmp_path):
    os.mkfifo(tmp_path / "alice.zip")
    with pytest.raises(SubmissionError, match="not a regular file"):
        unpack(tmp_path / "alice.zip", tmp_path)
    with pytest.raises(Unreadable, match="not a regular file"):
        payload(tmp_path / "alice.zip")


@AS_ROOT
def test_fifos_and_devices_in_a_folder_are_left_out_unopened(tmp_path):
    folder = tmp_path / "alice"
    shutil.copytree(CORRECT, folder)
    os.mkfifo(folder / "pipe.py")
    _zero_device(folder / "zero.py")
    assert special_files(unpack(folder, tmp_path)) == ["pipe.py", "zero.py"]
    _, data = payload(folder)  # would block on the FIFO, or fill memory from the device
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "quiz.py" in names and not {"pipe.py", "zero.py"} & set(names)
    box = Sandbox(folder, tmp_path)  # its copy of the submission: the disk would fill from the device
    copied = box.area / "submission"
    assert not (copied / "zero.py").exists() and (copied / "quiz.py").is_file()
    box.close()


def test_a_fifo_in_a_class_folder_is_a_row_not_a_hang(tmp_path):
    classroom = tmp_path / "class"
    classroom.mkdir()
    os.mkfifo(classroom / "mallory.zip")
    (classroom / "erin.zip").write_bytes(b"")
    (classroom / os.fsdecode(b"\xffbad\nname.zip")).write_bytes(b"")  # not UTF-8, a newline: a row too
    done = _grade_all(classroom, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    rows = _gradebook(tmp_path / "out")
    assert rows["mallory"][-1] == "unreadable" and rows["erin"][-1] == "empty"
    assert rows["_bad_name"][-1] == "empty"


def test_a_notebook_is_capped_like_a_zip(tmp_path):
    notebook = tmp_path / "alice.ipynb"
    with open(notebook, "wb") as file:
        file.truncate(MAX_ZIP_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(SubmissionError, match="larger than"):
        unpack(notebook, tmp_path / "scratch")


def test_grade_all_reads_no_more_of_a_student_than_a_grading_would(tmp_path):
    with open(tmp_path / "alice.ipynb", "wb") as file:
        file.truncate(MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(Unreadable, match="larger than"):
        payload(tmp_path / "alice.ipynb")
    (tmp_path / "bob").mkdir()
    for name in ("a.py", "b.py"):
        with open(tmp_path / "bob" / name, "wb") as file:
            file.truncate(MAX_PAYLOAD_BYTES // 2 + 1)
    with pytest.raises(Unreadable, match="holds more than"):
        payload(tmp_path / "bob")


# -- zips --------------------------------------------------------------------------------------------
def _bad_crc_zip(target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("quiz.py", "ANSWERS = {}\n")
    data = target.read_bytes()
    target.write_bytes(data.replace(b"ANSWERS", b"ANSWERZ", 1))  # the stored CRC no longer matches
    return target


def test_every_zip_error_is_unreadable(tmp_path):
    (tmp_path / "scratch").mkdir()
    with pytest.raises(SubmissionError, match="cannot unpack alice.zip: Bad CRC"):
        unpack(_bad_crc_zip(tmp_path / "alice.zip"), tmp_path / "scratch")


# -- names and ids ---------------------------------------------------------------------------------
def test_any_canvas_file_name_is_a_row(tmp_path):
    classroom = tmp_path / "class"
    classroom.mkdir()
    (classroom / "mallory_12_22_..").write_text("x = 1\n")
    (classroom / "mallory_12_23_.").write_text("x = 2\n")
    (classroom / "mallory_12_24_quiz.py").write_text("ANSWERS = {}\n")
    (found,) = discover(classroom, tmp_path / "scratch")
    assert found.students == ("mallory_12",)
    assert sorted(path.name for path in found.source.iterdir()) == ["_", "quiz.py"]


def test_ids_that_look_like_options_or_formulas_are_graded_as_names_and_written_as_text(tmp_path):
    """`-A2+B2` is a file name for `grader grade`, not an option (so its broken zip is `unreadable`, the
    same every run); `+1+1`, `@A1` and `-A2+B2` are text in gradebook.csv, never formulas."""
    classroom = tmp_path / "class"
    classroom.mkdir()
    _bad_crc_zip(classroom / "-A2+B2.zip")
    os.mkfifo(classroom / "+1+1.zip")
    (classroom / "@A1").mkdir()
    done = _grade_all(classroom, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    rows = _gradebook(tmp_path / "out")
    assert rows["'-A2+B2"][-1] == "unreadable", rows
    assert rows["'+1+1"][-1] == "unreadable" and rows["'@A1"][-1] == "empty"
    state = (tmp_path / "out" / ".grade-all-state.json").read_text()
    assert "cannot unpack -A2+B2.zip: Bad CRC" in state


# -- Gradescope's metadata -------------------------------------------------------------------------
def _alias_bomb(levels: int, width: int) -> list[str]:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    return lines + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]


def test_a_metadata_alias_bomb_is_refused_at_once(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    (export / METADATA).write_text("\n".join(_alias_bomb(12, 10)) + "\n")  # 10**12 x once expanded
    with pytest.raises(ClassError, match="aliases"):
        discover(export, tmp_path / "scratch")


def test_aliases_under_the_limit_are_never_expanded(tmp_path):
    """A submitter's id that is a list (9**10 items once expanded) is not text: the folder's name is
    the student."""
    export = tmp_path / "export"
    shutil.copytree(CORRECT, export / "submission_1")
    bomb = _alias_bomb(10, 9)
    assert 9 * 9 <= MAX_ALIASES
    (export / METADATA).write_text("\n".join(bomb) + "\nsubmission_1:\n  :submitters:\n  - :sid: *a9\n")
    found = discover(export, tmp_path / "scratch")
    assert [s.students for s in found if s.source.name == "submission_1"] == [("submission_1",)]


def test_metadata_folders_are_confined_to_the_export(tmp_path):
    export = tmp_path / "export"
    shutil.copytree(CORRECT, export / "submission_1")
    (export / METADATA).write_text(
        "submission_1:\n  :submitters:\n  - :sid: '1'\n"
        f"{tmp_path / 'elsewhere'}:\n  :submitters:\n  - :sid: '2'\n"
        "../outside:\n  :submitters:\n  - :sid: '3'\n")
    found = {s.students[0]: s for s in discover(export, tmp_path / "scratch")}
    assert found["1"].problem == ""
    assert "outside the export" in found["2"].problem and "outside the export" in found["3"].problem
