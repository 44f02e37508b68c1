"""constraints.txt holds the exact version of every package installed here, and everything that installs
the grader for a course installs under it: README's quick start (which CI runs) and the Gradescope bundle's
setup.sh (issue 31)."""
import re
import zipfile
from importlib.metadata import distributions

import pytest

from grader.instructor import autograder
from grader.instructor.autograder import CONSTRAINTS, AutograderError, build_autograder, pinned_versions
from helpers import ROOT

PINNED = pinned_versions((ROOT / CONSTRAINTS).read_text())
NOT_FROZEN = {"pip", "setuptools", "wheel", "distribute", "module9-transformer-lab"}
"""What `pip freeze` leaves out (its own tools), and the project itself."""


def _installed() -> dict[str, str]:
    """Every distribution installed here, by normalized name, without a local label (torch's "+cpu")."""
    found = {re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(): dist.version.partition("+")[0]
             for dist in distributions()}
    return {name: version for name, version in found.items() if name not in NOT_FROZEN}


def test_the_installed_set_is_exactly_the_constraints_file():
    installed = _installed()
    differ = sorted(f"{name}: installed {installed.get(name, 'none')}, pinned {PINNED.get(name, 'none')}"
                    for name in installed.keys() | PINNED.keys() if installed.get(name) != PINNED.get(name))
    assert not differ, (f"the installed set is not {CONSTRAINTS}'s (README's 'Dependencies and why' says "
                        "how to write it again): " + "; ".join(differ))


def test_the_quick_start_installs_everything_under_the_constraints_file():
    quick_start = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    installs = re.findall(r"pip install ([^&]*)", quick_start)
    assert len(installs) == 2 and all(f"-c {CONSTRAINTS} " in command for command in installs), installs
    assert f"torch=={PINNED['torch']}" in installs[0]  # never a bare torch, which may pull a CUDA build


def test_the_bundle_pins_the_constraints_file_and_refuses_other_installed_versions(tmp_path, monkeypatch):
    bundle = build_autograder(tmp_path / "autograder.zip")
    with zipfile.ZipFile(bundle) as archive:
        assert archive.read(CONSTRAINTS).decode() == (ROOT / CONSTRAINTS).read_text()
        setup = archive.read("setup.sh").decode()
    assert setup.count('--constraint "$source/constraints.txt"') == 1 and setup.count('"${pins[@]}"') == 2
    installed = autograder.pins()
    monkeypatch.setattr(autograder, "pins", lambda: {**installed, "numpy": "1.0.0"})
    with pytest.raises(AutograderError, match=r"numpy 1\.0\.0 \(the file: .*pip install -c constraints.txt"):
        build_autograder(tmp_path / "other.zip")
    assert not (tmp_path / "other.zip").exists()
