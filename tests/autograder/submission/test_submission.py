"""Reading a submission: a directory, a zip (safely), or a notebook's file cells."""
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.submission import CELLS_FILE, SubmissionError, replaced_cells, unpack
from helpers import EXAMPLES, notebook_of, zip_of


def test_a_directory_or_its_single_subfolder(tmp_path: Path):
    (tmp_path / "hw" / "lab").mkdir(parents=True)
    (tmp_path / "hw" / "lab" / "quiz.py").write_text("ANSWERS = {}\n")
    assert unpack(tmp_path / "hw", tmp_path) == tmp_path / "hw" / "lab"


def test_a_zip_is_extracted(tmp_path: Path):
    archive = tmp_path / "s.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("lab/quiz.py", "ANSWERS = {}\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert (unpack(archive, scratch) / "quiz.py").read_text() == "ANSWERS = {}\n"


def test_a_zip_cannot_write_outside_its_folder(tmp_path: Path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../escaped.py", "x = 1\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(SubmissionError, match="outside"):
        unpack(archive, scratch)
    assert not (tmp_path / "escaped.py").exists()


def test_a_notebook_is_read_not_run(tmp_path: Path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%%writefile attention.py\nraise SystemExit('never run')"),
        nbformat.v4.new_code_cell("# file: quiz.py\nANSWERS = {'q1': 'b'}"),
        nbformat.v4.new_code_cell("import os; os._exit(1)"),
    ]
    nbformat.write(notebook, tmp_path / "lab.ipynb")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    files = unpack(tmp_path / "lab.ipynb", scratch)
    assert sorted(p.name for p in files.iterdir()) == [CELLS_FILE, "attention.py", "quiz.py"]
    assert "ANSWERS = {'q1': 'b'}" in (files / "quiz.py").read_text()


@pytest.mark.parametrize("name,content", [("missing", None), ("notes.txt", "hello"), ("bad.ipynb", "{")])
def test_unreadable_submissions_get_a_clear_error(tmp_path: Path, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(SubmissionError):
        unpack(path, tmp_path)


def _zip(archive: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(archive, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return archive


EXERCISES = {f"{name}.py": f"# {name}\n" for name in ("attention", "positional", "quiz")}


def test_a_zip_of_a_repository_grades_its_one_exercise_folder(tmp_path: Path):
    """The student release zipped whole: exercises/ beside the grader's own suites (named after the
    components, inside a package) and a package with one file named like a component."""
    files = {f"lab-main/exercises/{name}": text for name, text in EXERCISES.items()}
    for name in ("exercises/__init__.py", "grader/__init__.py", "grader/suites/__init__.py",
                 "grader/suites/public/attention.py", "experiments/__init__.py", "experiments/positional.py"):
        files[f"lab-main/{name}"] = "x = 1\n"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    found = unpack(_zip(tmp_path / "lab.zip", files), scratch)
    assert found == scratch / "lab-main" / "exercises"


def test_a_zip_with_several_exercise_folders_says_what_it_found(tmp_path: Path):
    files = {f"lab/{folder}/{name}": text for folder in ("exercises", "solutions")
             for name, text in EXERCISES.items()}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(SubmissionError) as error:
        unpack(_zip(tmp_path / "lab.zip", files), scratch)
    assert str(error.value) == (f"{tmp_path / 'lab.zip'}: found exercise files in lab/exercises/ and "
                                "lab/solutions/: pass one of those folders")


def _notebook(tmp_path: Path, *sources: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nbformat.write(notebook, tmp_path / "lab.ipynb")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return unpack(tmp_path / "lab.ipynb", scratch)


def test_a_later_writefile_cell_replaces_the_file_as_in_jupyter(tmp_path: Path):
    files = _notebook(tmp_path, "%%writefile attention.py\ndef f(:\n",
                      "%%writefile attention.py\ndef f():\n    return 1")
    assert (files / "attention.py").read_text() == "def f():\n    return 1\n"


def test_the_cells_that_wrote_a_file_are_known_the_last_one_graded(tmp_path: Path):
    files = _notebook(tmp_path, "%%writefile attention.py\nA = 1", "print('a cell of its own')",
                      "%%writefile -a attention.py\nB = 2", "%%writefile attention.py\nC = 3",
                      "%%writefile quiz.py\nQ = 1", "%%writefile -a quiz.py\nR = 2")
    assert replaced_cells(files, "attention.py") == (4, [1])  # cells counted from 1, appends not replacing
    assert replaced_cells(files, "quiz.py") is None  # one cell wrote it, another appended
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / CELLS_FILE).write_text('{"attention.py": ["1; rm -rf", 2]}')
    assert replaced_cells(tmp_path / "folder", "attention.py") is None  # a folder's own file is not trusted


@pytest.mark.parametrize("flag", ["-a", "--append"])
def test_writefile_append_appends_as_in_jupyter(tmp_path: Path, flag):
    files = _notebook(tmp_path, "%%writefile attention.py\nA = 1", f"%%writefile {flag} attention.py\nB = 2")
    assert (files / "attention.py").read_text() == "A = 1\nB = 2\n"


def test_a_folder_or_zip_holding_one_uploaded_zip_or_notebook_is_that_upload_once(tmp_path):
    """Gradescope keeps a student who uploaded one zip or notebook as a folder holding that file, and
    grade-all zips such a folder: either is the upload's files. Once only: an upload's own uploads are not
    looked into (a zip may hold itself)."""

    folder = tmp_path / "student"
    folder.mkdir()
    zip_of(EXAMPLES / "correct", folder / "work.zip")
    assert (unpack(folder, tmp_path / "a") / "attention.py").is_file()
    wrapped = zip_of(folder, tmp_path / "wrapped.zip")
    (tmp_path / "b").mkdir()
    assert (unpack(wrapped, tmp_path / "b") / "attention.py").is_file()
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    notebook_of(notebook / "lab.ipynb", {"quiz.py": "ANSWERS = {}"})
    assert (unpack(notebook, tmp_path / "c") / "quiz.py").is_file()
    nested = tmp_path / "nested"
    nested.mkdir()
    zip_of(folder, nested / "again.zip")  # a zip of a folder that holds a zip
    (tmp_path / "d").mkdir()
    with pytest.raises(SubmissionError, match="holds none of"):
        unpack(nested, tmp_path / "d")
