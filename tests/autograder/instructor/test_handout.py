"""The handout's install steps, run as a student runs them: in the unzipped release, a fresh virtual
environment, the "Install" section's Linux lines one by one (README.md of the release), from the package
index. One change only: PyTorch's CPU index cannot be reached from here, so the torch line takes the
same build from a local wheel of this interpreter's torch version (skipped where there is none).

On the way, Colab is imitated: a kernel whose environment has torch and ipykernel but not the lab runs
the notebook's setup cell, which must install the lab from lab.zip and leave that torch as it was.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from grader.instructor.release import build_release

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.sandbox]

CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
_BLOCK = re.compile(r"^## Install\n.*?^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _local_torch_wheels() -> Path:
    """A folder holding this torch version's wheel (pip's find-links here), or skip."""
    folders = [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]
    for folder in map(Path, filter(None, folders)):
        if list(folder.glob(f"torch-{torch.__version__}-*.whl")):
            return folder
    pytest.skip(f"no local wheel of torch {torch.__version__}; the handout's torch comes from PyTorch's "
                "CPU index, which cannot be reached from here")


def _sh(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"$ {line}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def _colab_setup_cell(notebook: Path, python: Path, jupyter: Path) -> None:
    """Run lab.ipynb's setup cell in a kernel of `python`, in the notebook's folder."""
    spec = jupyter / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "colab", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    cells = nbformat.read(notebook, as_version=4).cells
    setup = next(cell for cell in cells if cell.cell_type == "code")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(jupyter))
        patch.delenv("PYTHONPATH", raising=False)
        client = NotebookClient(nbformat.v4.new_notebook(cells=[setup]), timeout=900, kernel_name="python3",
                                resources={"metadata": {"path": str(notebook.parent)}})
        client.execute()


def test_the_handouts_install_steps_work_as_written(tmp_path: Path):
    wheels = _local_torch_wheels()
    zipped = build_release(tmp_path / "dist" / "lab")
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(tmp_path)
    lab = tmp_path / "lab"
    lines = _BLOCK.search((lab / "README.md").read_text()).group(1).strip().splitlines()
    assert lines[2] == f"pip install torch {CPU_INDEX}" and lines[3] == 'pip install -e ".[notebook]"'
    lines[2] = f"pip install torch=={torch.__version__} --find-links {wheels}"
    venv = lab / ".venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # python3: a 3.11+
    activated = " && ".join(lines[:2])  # each later line runs in the activated environment, as typed

    for line in lines[:3]:
        _sh(line if line in lines[:2] else f"{activated} && {line}", lab, env)
    python = venv / "bin" / "python"
    version = _sh(f"{python} -c 'import torch; print(torch.__version__)'", lab, env).stdout.strip()

    # Colab: torch and ipykernel are there, the lab is not; lab.zip and lab.ipynb are uploaded together.
    shutil.copy(zipped, lab / "lab.zip")
    _sh(f"{activated} && pip install -q ipykernel", lab, env)
    _colab_setup_cell(lab / "lab.ipynb", python, tmp_path / "jupyter")
    probe = "import grader.cli, torch; print(torch.__version__)"
    assert _sh(f"{python} -c '{probe}'", lab, env).stdout.strip() == version, "Colab's torch is kept"

    _sh(f"{activated} && {lines[3]}", lab, env)
    assert _sh(f"{python} -c '{probe}'", lab, env).stdout.strip() == version, "torch is kept"
    kernels = json.loads(_sh(f"{activated} && jupyter kernelspec list --json", lab, env).stdout)
    assert "python3" in kernels["kernelspecs"], "lab.ipynb's kernel (NoSuchKernel without ipykernel)"
    done = _sh(f"{activated} && grader check --json stubs.json", lab, env)
    card = json.loads((lab / "stubs.json").read_text())
    assert {t["status"] for t in card["tests"]} == {"not_attempted"}
    assert done.stdout.rstrip().splitlines()[-1] == f"isolation: {card['sandbox']['summary']}"
