"""Finding a class's submissions (folders, zips, notebooks, Gradescope and Canvas exports) and
packing each as data for a grading process (grader/classroom.py, grader/runner.py's payload)."""
import os
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.grading import GradeOptions
from grader.instructor import runner
from grader.instructor.classroom import ClassError, discover
from grader.instructor.runner import Empty, payload
from helpers import EXAMPLES

CORRECT = EXAMPLES / "correct"


def zip_of(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return target


def notebook_of(target: Path, files: dict[str, str]) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(f"%%writefile {name}\n{text}")
                      for name, text in files.items()]
    nbformat.write(notebook, target)
    return target


def test_a_folder_of_folders_zips_and_notebooks(tmp_path):
    shutil.copytree(CORRECT, tmp_path / "class" / "alice")
    zip_of(CORRECT, tmp_path / "class" / "bob.zip")
    notebook_of(tmp_path / "class" / "carol.ipynb", {"quiz.py": "ANSWERS = {}"})
    (tmp_path / "class" / ".DS_Store").write_text("")
    (tmp_path / "class" / "out").mkdir()  # the output folder, inside: left out
    found = discover(tmp_path / "class", tmp_path / "scratch", skip=tmp_path / "class" / "out")
    assert [(s.students, s.source.name) for s in found] == [
        (("alice",), "alice"), (("bob",), "bob.zip"), (("carol",), "carol.ipynb")]


def test_a_gradescope_export(tmp_path):
    """Gradescope's "Download submissions": one folder per submission, submitters in the metadata."""
    export = tmp_path / "export"
    shutil.copytree(CORRECT, export / "assignment_42_export" / "submission_1001")
    shutil.copytree(CORRECT, export / "assignment_42_export" / "submission_1002")
    (export / "assignment_42_export" / "submission_metadata.yml").write_text(
        "submission_1001:\n"
        "  :submitters:\n"
        "  - :name: Ada Lovelace\n"
        "    :sid: '314'\n"
        "    :email: ada@example.edu\n"
        "  :created_at: 2026-11-30 10:00:00.000000000 -08:00\n"
        "  :score: 0.0\n"
        "submission_1002:\n"
        "  :submitters:\n"
        "  - :name: Alan Turing\n"
        "    :sid: '271'\n"
        "  - :name: Grace Hopper\n"
        "    :email: grace@example.edu\n")
    zipped = zip_of(export, tmp_path / "submissions.zip")
    found = discover(zipped, tmp_path / "scratch")
    assert [(s.students, s.source.name) for s in found] == [
        (("271", "grace@example.edu"), "submission_1002"), (("314",), "submission_1001")]
    assert all((s.source / "attention.py").is_file() for s in found)
    # what an LMS knows each submitter by (lms.py matches the roster on it)
    assert found[0].keys == {"271": ("271", "Alan Turing"),
                             "grace@example.edu": ("grace@example.edu", "Grace Hopper")}
    assert found[1].keys == {"314": ("314", "ada@example.edu", "Ada Lovelace")}


def test_a_canvas_export(tmp_path):
    """Canvas's flat `name_[LATE_]userid_submissionid_file` names, a resubmission's `-1` undone."""
    export = tmp_path / "canvas"
    export.mkdir()
    for name in ("attention.py", "model.py"):
        late = "LATE_" if name == "model.py" else ""
        target = name.replace(".py", "-1.py") if late else name
        shutil.copyfile(CORRECT / name, export / f"lovelaceada_{late}314_9001_{target}")
    zip_of(CORRECT, export / "turingalan_271_9002_lab9.zip")
    found = discover(export, tmp_path / "scratch")
    assert [s.students for s in found] == [("lovelaceada_314",), ("turingalan_271",)]
    assert [s.keys for s in found] == [{"lovelaceada_314": ("314",)}, {"turingalan_271": ("271",)}]
    assert sorted(p.name for p in found[0].source.iterdir()) == ["attention.py", "model.py"]
    assert found[1].source.name == "turingalan_271_9002_lab9.zip"


def test_what_is_not_a_class_says_so(tmp_path):
    with pytest.raises(ClassError, match="one submission"):
        discover(CORRECT, tmp_path)
    (tmp_path / "class" / "alice").mkdir(parents=True)
    zip_of(CORRECT, tmp_path / "class" / "alice.zip")
    with pytest.raises(ClassError, match="more than one submission.*alice: alice, alice.zip"):
        discover(tmp_path / "class", tmp_path / "scratch")


def test_a_folder_travels_as_a_zip_of_its_files(tmp_path):
    shutil.copytree(CORRECT, tmp_path / "alice")
    (tmp_path / "alice" / "leak.py").symlink_to("/etc/hostname")  # would read the instructor's disk
    name, data = payload(tmp_path / "alice")
    os.utime(tmp_path / "alice" / "quiz.py", (0, 0))
    assert payload(tmp_path / "alice") == (name, data)  # the hash does not depend on mtimes
    (tmp_path / name).write_bytes(data)
    with zipfile.ZipFile(tmp_path / name) as archive:
        assert sorted(archive.namelist()) == sorted(p.name for p in CORRECT.glob("*.py"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "nothing.ipynb").write_text("")
    zip_of(tmp_path / "empty", tmp_path / "no-files.zip")
    for empty in ("empty", "nothing.ipynb", "no-files.zip", "missing"):
        with pytest.raises(Empty):
            payload(tmp_path / empty)


@pytest.mark.sandbox
def test_a_judge_process_that_cannot_fork_grades_the_job_itself(tmp_path, monkeypatch):
    """No process to spare (the fork fails): grade-all's judge process grades the job in itself and
    replies as its fork would have."""
    class NoFork:
        def __getattr__(self, name: str):
            return getattr(os, name)

        @staticmethod
        def fork() -> int:
            raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(runner, "os", NoFork())
    monkeypatch.chdir(tmp_path)  # the grading goes into the job's folder
    shutil.copytree(CORRECT, tmp_path / "alice")
    options = GradeOptions(components=("quiz",)).to_json()
    reply = runner._graded_in_a_fork({"folder": str(tmp_path), "name": "alice", "options": options})
    assert reply["outcome"] == "graded" and reply["card"]["score"] == reply["card"]["max_score"] > 0
