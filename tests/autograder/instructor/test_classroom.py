"""Finding a class's submissions (folders, zips, notebooks, Gradescope and Canvas exports) and
packing each as data for a grading process (grader/classroom.py, grader/runner.py's payload)."""
import os
import shutil
import zipfile

import pytest

from grader.instructor.classroom import ClassError, discover
from grader.instructor.runner import Empty, payload
from helpers import EXAMPLES, notebook_of, zip_of

CORRECT = EXAMPLES / "correct"


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


def test_canvas_late_in_any_case_and_the_newest_upload_wins_by_id(tmp_path):
    """`_late_` and `_LATE_` are both Canvas names; of two uploads of one file the higher id wins
    (9999 is older than 10000, though it sorts after it), and the merge is said."""
    export = tmp_path / "canvas"
    export.mkdir()
    (export / "lovelaceada_late_51_9999_trainer.py").write_text("OLD = 1\n")
    (export / "lovelaceada_LATE_51_10000_trainer-1.py").write_text("NEW = 1\n")
    (export / "lovelaceada_51_9999_quiz.py").write_text("ANSWERS = {}\n")
    zip_of(CORRECT, export / "turingalan_late_52_9003_lab9.zip")
    found = discover(export, tmp_path / "scratch")
    assert [s.students for s in found] == [("lovelaceada_51",), ("turingalan_52",)]
    ada = found[0]
    assert (ada.source / "trainer.py").read_text() == "NEW = 1\n"
    assert sorted(p.name for p in ada.source.iterdir()) == ["quiz.py", "trainer.py"]
    assert ada.notes == ("files of 2 uploads (9999, 10000) merged, the newest of each name kept: "
                         "quiz.py from 9999, trainer.py from 10000",)
    # Canvas' bulk feedback upload files a comment by the first two numbers of its name: user, file
    assert ada.handback == "lovelaceada_51_10000_feedback.html" and found[1].notes == ()


def test_a_moodle_download_all_submissions(tmp_path):
    """Folders `Full Name_PARTICIPANT_assignsubmission_file_` (and without the last `_`, Moodle 4.1 on),
    flat files where "download in folders" is off; online text left out."""
    export = tmp_path / "moodle"
    shutil.copytree(CORRECT, export / "Ada Lovelace_1001_assignsubmission_file_")
    (export / "Ada Lovelace_1001_assignsubmission_onlinetext_").mkdir()
    (export / "Ada Lovelace_1001_assignsubmission_onlinetext_" / "onlinetext.html").write_text("<p>hi</p>")
    shutil.copytree(CORRECT, export / "Alan Turing_1002_assignsubmission_file" / "lab")
    (export / "Grace Hopper_1003_assignsubmission_file_quiz.py").write_text("ANSWERS = {}\n")
    found = discover(export, tmp_path / "scratch")
    assert [(s.students, s.keys) for s in found] == [
        (("Ada_Lovelace_1001",), {"Ada_Lovelace_1001": ("Participant 1001",)}),
        (("Alan_Turing_1002",), {"Alan_Turing_1002": ("Participant 1002",)}),
        (("Grace_Hopper_1003",), {"Grace_Hopper_1003": ("Participant 1003",)})]
    assert sorted(p.name for p in found[0].source.iterdir()) == sorted(p.name for p in CORRECT.iterdir()
                                                                       if p.is_file())
    assert (found[1].source / "lab" / "attention.py").is_file()  # a student's own folder kept
    assert [p.name for p in found[2].source.iterdir()] == ["quiz.py"]
    # Moodle's "Upload multiple feedback files in a zip" files a file by its folder's participant number
    assert found[0].handback == "Ada Lovelace_1001_assignsubmission_file_/feedback.html"


def test_an_oversized_or_broken_entry_costs_its_student_only(tmp_path, monkeypatch):
    """An export whose entry for one student is larger than one submission's cap (or will not
    unpack): that student is unreadable, saying the cap; the others are read."""
    from grader.instructor import classroom
    monkeypatch.setattr(classroom, "MAX_ZIP_BYTES", 4096)
    export = tmp_path / "export.zip"
    with zipfile.ZipFile(export, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("lovelaceada_51_9001_quiz.py", "ANSWERS = {}\n")
        archive.writestr("turingalan_52_9002_model.py", "x" * 5000)
        archive.writestr("hopper/quiz.py", "ANSWERS = {}\n")
        archive.writestr("liskov/data.bin", "y" * 5000)
        archive.writestr("curie/quiz.py", "ANSWERS = {'q1': 'CORRUPT ME'}\n", zipfile.ZIP_STORED)
    export.write_bytes(export.read_bytes().replace(b"CORRUPT ME", b"corrupt me"))  # its CRC no longer holds
    found = discover(export, tmp_path / "scratch")
    problems = {s.students[0]: s.problem for s in found}
    cap = "is larger than the cap of 4096 bytes for one file: not read"
    assert problems.pop("curie").startswith("quiz.py cannot be unpacked (Bad CRC-32")
    assert problems == {"hopper": "", "liskov": f"data.bin {cap}", "lovelaceada_51": "",
                        "turingalan_52": f"turingalan_52_9002_model.py {cap}"}
