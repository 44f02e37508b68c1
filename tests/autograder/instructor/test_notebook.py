"""The lab notebook: built from the stubs and the handout, a submission as it stands, and, executed in
a real Jupyter kernel, a working lab: the stubs read "not attempted", the reference's code passes every
public test and grades exactly like the same files."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from grader.cli import main as grader_main
from grader.instructor.notebook import SETUP, check_cell, handout_sections, main, write_notebook
from grader.spec import COMPONENTS, DEPENDS
from grader.submission import unpack
from helpers import ROOT

pytestmark = pytest.mark.xdist_group("notebook")  # its module fixtures are costly: one worker builds them

HANDOUT = ROOT / "docs" / "lab.md"
_ROW = r"^\s*{}\s+(?P<score>[\d.]+)/(?P<max>[\d.]+)\s+(?P<passed>\d+)/(?P<total>\d+)\s+(?P<status>\S.*?)\s*$"


@pytest.fixture(scope="module")
def notebook_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_notebook(ROOT / "exercises", HANDOUT, tmp_path_factory.mktemp("release") / "lab.ipynb")


def file_cells(notebook: nbformat.NotebookNode) -> dict[str, int]:
    """{NAME.py: index} of the `%%writefile NAME.py` cells."""
    return {cell.source.split("\n", 1)[0].split()[-1]: i for i, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and cell.source.startswith("%%writefile ")}


def check_cells(notebook: nbformat.NotebookNode) -> dict[str, int]:
    """{component: index} of the cells that run the public check."""
    return {c: i for c in COMPONENTS for i, cell in enumerate(notebook.cells) if cell.source == check_cell(c)}


def test_the_notebook_has_the_handouts_parts_with_a_file_cell_and_a_check_each(notebook_path: Path):
    notebook = nbformat.read(notebook_path, as_version=4)
    nbformat.validate(notebook)
    intro, parts, closing = handout_sections(HANDOUT.read_text())
    assert notebook.cells[0].source.startswith(intro) and "import sys" in notebook.cells[1].source
    assert notebook.cells[-1].source == closing
    files, checks = file_cells(notebook), check_cells(notebook)
    assert list(files) == [f"{c}.py" for c in COMPONENTS] and set(checks) == set(COMPONENTS)
    for component in COMPONENTS:
        cell = files[f"{component}.py"]
        assert notebook.cells[cell - 1].source == parts[component][1]
        stub = (ROOT / "exercises" / f"{component}.py").read_text()
        assert notebook.cells[cell].source == f"%%writefile {component}.py\n{stub.rstrip()}"
        # Run top to bottom, every file the check runs has been written before it.
        written_before = {name for name, i in files.items() if i < checks[component]}
        assert {f"{d}.py" for d in (component, *DEPENDS.get(component, ()))} <= written_before
    assert checks["attention"] > files["positional.py"] > checks["attention"] - 3  # right after Part 2


@pytest.mark.sandbox  # a Python process of its own: a fresh kernel
def test_a_student_imports_their_own_files_next_to_the_notebook_afresh(tmp_path: Path):
    for name in ("attention", "positional"):
        shutil.copy(ROOT / "solutions" / f"{name}.py", tmp_path)
    edited = (ROOT / "solutions" / "attention.py").read_text() + "\n\ndef added():\n    return 'rewritten'\n"
    tried = (f"{SETUP}\nattention = mine('attention')\nprint(attention.causal_mask(3).sum().item())\n"
             f"open('attention.py', 'w').write({edited!r})\nprint(mine('attention').added())\n")
    run = subprocess.run([sys.executable, "-c", tried], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.split() == ["6", "rewritten"], run.stderr


def test_the_stub_notebook_is_a_submission_of_the_stubs(notebook_path: Path, tmp_path: Path):
    directory = unpack(notebook_path, tmp_path)
    for component in COMPONENTS:
        stub = (ROOT / "exercises" / f"{component}.py").read_text()
        assert (directory / f"{component}.py").read_text().strip() == stub.strip()


def test_a_handout_without_a_part_is_refused(tmp_path: Path):
    handout = tmp_path / "lab.md"
    handout.write_text(re.sub(r"^## Part 3 — ", "## Part three: ", HANDOUT.read_text(), flags=re.MULTILINE))
    with pytest.raises(ValueError, match="none for \\['feedforward'\\]"):
        write_notebook(ROOT / "exercises", handout, tmp_path / "lab.ipynb")


def test_the_command_writes_lab_ipynb_into_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    assert main([str(tmp_path)]) == 0
    assert file_cells(nbformat.read(tmp_path / "lab.ipynb", as_version=4))


# Executed in a real kernel ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    """A `python3` kernel spec that runs this interpreter (whatever kernel specs the machine has),
    and this checkout's grader on the path of the kernel and of the check cells' grader runs."""
    jupyter = tmp_path_factory.mktemp("jupyter")
    spec = jupyter / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "lab", "language": "python"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(jupyter))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        yield


def execute(notebook: nbformat.NotebookNode, folder: Path) -> dict[str, dict[str, str]]:
    """Run the notebook in `folder` (an error in any cell fails the test); each check cell's scorecard row."""
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    client.execute()
    rows = {}
    for component, i in check_cells(notebook).items():
        text = "".join(out.get("text", "") for out in notebook.cells[i].outputs)
        match = re.search(_ROW.format(component), text, re.MULTILINE)
        assert match, f"no scorecard row for {component} in:\n{text}"
        rows[component] = match.groupdict()
    return rows


def with_reference_code(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with each file cell's body replaced by the reference's file."""
    for i in file_cells(notebook).values():
        name = notebook.cells[i].source.split("\n", 1)[0].split()[-1]
        notebook.cells[i].source = f"%%writefile {name}\n{(ROOT / 'solutions' / name).read_text()}"
    return notebook


@pytest.fixture(scope="module")
def reference_run(notebook_path: Path, kernel, tmp_path_factory: pytest.TempPathFactory):
    """The reference notebook, executed and saved as the student would hand it in; its check rows."""
    folder = tmp_path_factory.mktemp("reference-notebook")
    notebook = with_reference_code(nbformat.read(notebook_path, as_version=4))
    rows = execute(notebook, folder)
    nbformat.write(notebook, folder / "lab.ipynb")
    return folder / "lab.ipynb", rows


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_stub_notebook_runs_to_the_end_and_every_part_reads_not_attempted(notebook_path, kernel,
                                                                              tmp_path):
    notebook = nbformat.read(notebook_path, as_version=4)
    rows = execute(notebook, tmp_path)
    assert {c: row["status"] for c, row in rows.items()} == dict.fromkeys(COMPONENTS, "not attempted")
    assert {f"{c}.py" for c in COMPONENTS} <= {p.name for p in tmp_path.iterdir()}  # the cells wrote them


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_reference_notebook_passes_every_public_test(reference_run):
    _, rows = reference_run
    assert set(rows) == set(COMPONENTS)
    for component, row in rows.items():
        assert row["status"] == "ok" and row["passed"] == row["total"], component
        assert row["score"] == row["max"], component


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_reference_notebook_grades_like_the_same_files(reference_run, tmp_path: Path):
    path, _ = reference_run
    files = shutil.copytree(ROOT / "solutions", tmp_path / "files")
    cards = []
    for submission in (path, files):
        assert grader_main(["grade", str(submission), "--json", str(tmp_path / "card.json")]) == 0
        cards.append(json.loads((tmp_path / "card.json").read_text()))
    assert cards[0] == cards[1]
    assert cards[0]["score"] == cards[0]["max_score"]  # full marks
