"""Reading a submission: a directory, a zip (safely), or a notebook's file cells."""
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.submission import SubmissionError, unpack


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
    assert sorted(p.name for p in files.iterdir()) == ["attention.py", "quiz.py"]
    assert "ANSWERS = {'q1': 'b'}" in (files / "quiz.py").read_text()


@pytest.mark.parametrize("name,content", [("missing", None), ("notes.txt", "hello"), ("bad.ipynb", "{")])
def test_unreadable_submissions_get_a_clear_error(tmp_path: Path, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(SubmissionError):
        unpack(path, tmp_path)
