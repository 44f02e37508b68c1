"""The Gradescope bundle's setup.sh, run for real in a fresh root: offline (a network namespace
where the unshare tool allows one), with a local package index standing in for PyPI and
PyTorch's index, from two working directories (the bundle's own source/ among them), and refused
with one clear message on an image it cannot install on.

What stands in for the network: the index holds the uv wheel, the grader's dependencies at the
pinned versions (downloaded once from PyPI by the test), and a small stand-in wheel named torch at
the pinned version (the real one is ~200 MB: setup.sh's logic, not torch, is under test here);
the machine's own CPython stands in for uv's download (UV_PYTHON_PREFERENCE=only-system)."""
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from grader.instructor.autograder import PINNED, UV_VERSION, build_autograder, constraints
from helpers import ROOT

pytestmark = pytest.mark.xdist_group("setup_sh")
PYPI_PACKAGES = (*(requirement for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())
                    ["project"]["dependencies"] if not requirement.startswith("torch")), "setuptools>=68")
"""What setup.sh installs besides torch: the project's own dependencies, read from its pyproject."""


def _wheel_name(filename: str) -> str:
    return re.sub(r"[-_.]+", "-", filename.split("-")[0]).lower()


def _stand_in_torch(folder: Path, version: str) -> None:
    """A wheel named torch at `version` whose import says what it is."""
    info = f"torch-{version}.dist-info"
    files = {"torch/__init__.py": "raise ImportError('a stand-in for torch (test_setup_sh.py)')\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"torch-{version}-py3-none-any.whl", "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PEP 503 simple index on disk (file://) of what setup.sh installs."""
    root = tmp_path_factory.mktemp("index")
    files = root / "files"
    files.mkdir()
    pins = root / "constraints.txt"
    pins.write_text(constraints())
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    wanted = [f"uv=={UV_VERSION}", *PYPI_PACKAGES, *(name for name in PINNED if name != "torch")]
    download = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
                               "--dest", str(files), "--constraint", str(pins), *wanted],
                              capture_output=True, text=True, env=env, timeout=600)
    if download.returncode != 0:
        pytest.skip(f"cannot fetch the index's wheels from PyPI: {download.stderr.strip()[-300:]}")
    _stand_in_torch(files, dict(line.split("==") for line in constraints().split())["torch"])
    projects: dict[str, list[str]] = {}
    for wheel in sorted(files.iterdir()):
        projects.setdefault(_wheel_name(wheel.name), []).append(wheel.name)
    for name, wheels in projects.items():
        (root / "simple" / name).mkdir(parents=True)
        links = "".join(f'<a href="../../files/{wheel}">{wheel}</a>\n' for wheel in wheels)
        (root / "simple" / name / "index.html").write_text(f"<!DOCTYPE html><body>{links}</body>")
    return root / "simple"


def _fresh_root(tmp_path: Path) -> Path:
    """/autograder as Gradescope has it when setup.sh runs: the bundle unzipped in source/."""
    bundle = build_autograder(tmp_path / "autograder.zip")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    (root / "source" / "setup.sh").chmod(0o755)
    return root


def _offline() -> list[str]:
    """A command prefix with no network but loopback, where this machine allows one."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


def _setup(root: Path, cwd: Path, index: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if Path(p).resolve() != Path(sys.executable).parent.resolve())  # not our venv
    url = index.as_uri()
    env = {"PATH": path, "HOME": str(root.parent), "AUTOGRADER_ROOT": str(root),
           "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": url, "UV_INDEX_URL": url, "TORCH_INDEX_URL": url,
           "UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON_PREFERENCE": "only-system"}
    return subprocess.run([*_offline(), "bash", str(root / "source" / "setup.sh")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["source", pytest.param("elsewhere", marks=pytest.mark.heavy)])
def test_setup_sh_installs_the_pinned_grader_on_a_released_python_from_any_folder(index, tmp_path, where):
    root = _fresh_root(tmp_path)
    cwd = root / "source" if where == "source" else tmp_path
    done = _setup(root, cwd, index)
    assert done.returncode == 0, done.stdout + done.stderr
    python = root / "venv" / "bin" / "python"
    probe = ("import sys, grader, numpy, hypothesis, importlib.metadata as m; "
             "print(sys.version_info >= (3, 11), sys.version_info.releaselevel, grader.__file__, "
             "';'.join(f'{n}=={m.version(n)}' for n in ('hypothesis', 'numpy', 'torch')))")
    released, level, grader_file, versions = subprocess.run(
        [str(python), "-I", "-c", probe], cwd=root / "source", capture_output=True, text=True,
        check=True).stdout.split()
    assert (released, level) == ("True", "final")
    assert Path(grader_file).is_relative_to(root / "venv")  # not source/grader, from source/ either
    assert set(versions.split(";")) <= set(constraints().split())
    installed = Path(grader_file).parent
    for private in (root / "source", root / "source" / "salt", installed.parent / "solutions",
                    installed / "suites" / "hidden"):
        assert private.stat().st_mode & 0o077 == 0, f"{private} is readable by others"
    worker_code = installed / "sandbox" / "worker" / "serve.py"
    assert worker_code.stat().st_mode & 0o004  # the worker's own code is not private


def test_an_image_without_python_or_a_package_manager_is_refused_clearly(tmp_path):
    root = _fresh_root(tmp_path)
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("uname", "bash"):  # an image with a shell, and nothing to install Python with
        (tools / tool).symlink_to(shutil.which(tool))
    done = subprocess.run([str(tools / "bash"), str(root / "source" / "setup.sh")], cwd=tmp_path,
                          env={"PATH": str(tools), "AUTOGRADER_ROOT": str(root)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("setup.sh: no python3 with pip on this image, and no apt-get or dnf")
    assert "Ubuntu 20.04, 22.04 and 24.04" in done.stderr
