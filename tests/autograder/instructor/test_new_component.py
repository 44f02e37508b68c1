"""`grader new-component` in a copy of the project (issue 34): the skeleton grades at once, and a component
filled in from a fixture (RMSNorm, tests/autograder/instructor/rmsnorm/) goes through the whole pipeline:
the reference scores full marks, its bug is caught in its component with its message, the student release
ships its stub without its answer, and the notebook has its part."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.instructor.new_component import BUG
from helpers import ROOT

pytestmark = [pytest.mark.sandbox, pytest.mark.xdist_group("new_component")]
FIXTURE = Path(__file__).resolve().parent / "rmsnorm"
FILLED = {"solutions/rmsnorm.py": "solution.py", "examples/submissions/correct/rmsnorm.py": "correct.py",
          "grader/suites/public/rmsnorm.py": "public.py", "grader/suites/hidden/rmsnorm.py": "hidden.py",
          "tests/reference/test_rmsnorm.py": "reference_tests.py"}
"""The skeleton files an author replaces with the component's own (the fixture's files)."""
EDITED = {
    "examples/submissions/bugs.py": (BUG.format(name="rmsnorm"), '''\
    Bug("rmsnorm_sum_not_mean", "rmsnorm", "rmsnorm.py",
        old="(x * x).mean(-1, keepdim=True)",
        new="(x * x).sum(-1, keepdim=True)",
        description="RMSNorm sums the squares instead of averaging them.",
        keywords=("r1", "rmsnorm")),
'''),
    "docs/lab.md": ("TODO what to implement, in the handout's words: `rmsnorm(x)` following its formula in "
                    "docs/spec.md.", "Implement `RMSNorm(d_model, eps=1e-6)` following (R1)."),
    "docs/spec.md": ("TODO the contract: `rmsnorm(x: Tensor) -> Tensor`, its formula with a tag of its own, "
                     "dtypes, errors.", "`RMSNorm(d_model, eps=1e-6)`, its `weight` starting at ones: (R1) "
                     "`y = x / sqrt(mean(x**2, last axis) + eps) * weight`, in the input's dtype."),
}
"""The texts an author writes in files that hold more than the component: (skeleton's text, the fixture's)."""
HAND_EDITED = len(FILLED) + len(EDITED)
"""Files an author edits by hand to add RMSNorm (issue 34 counted 20 before new-component)."""
_JUNK = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".hypothesis", ".pytest_cache",
                               "*.egg-info", "build", "results")


def _grader(project: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`grader ARGS` run on the copy: its own grader, reference and suites first on the path."""
    env = {**os.environ, "PYTHONPATH": str(project)}
    done = subprocess.run([sys.executable, "-m", "grader.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert not check or done.returncode == 0, f"grader {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project with a component rmsnorm (4 points, after feedforward), new-component's."""
    copy = tmp_path_factory.mktemp("lab") / "lab"
    shutil.copytree(ROOT, copy, ignore=_JUNK)
    _grader(copy, "new-component", "rmsnorm", "--points", "4", "--after", "feedforward")
    return copy


@pytest.mark.slow
@pytest.mark.smoke  # the quick form: seconds, where the whole pipeline below takes minutes
def test_the_skeleton_is_in_every_place_and_grades_at_once(project):
    assert '"feedforward", "rmsnorm", "block"' in (project / "grader" / "spec.py").read_text()
    lab = (project / "docs" / "lab.md").read_text()
    assert "## Part 4 — Rmsnorm (`rmsnorm.py`, 4 points: 2 public + 2 hidden)" in lab
    assert "## Part 5 — Transformer block" in lab and "| 4 | rmsnorm | `rmsnorm.py` | 2 | 2 | 4 | — |" in lab
    assert "Part 7 (trainer)" in lab  # a cross-reference renumbered
    assert "rmsnorm 4" in (project / "docs" / "grading.md").read_text()
    assert 'raise NotImplementedError("rmsnorm' in (project / "exercises" / "rmsnorm.py").read_text()
    _grader(project, "generate", "--check")
    card = project / "card.json"
    _grader(project, "grade", "solutions", "--only", "rmsnorm", "--json", str(card))
    assert json.loads(card.read_text())["components"]["rmsnorm"] == {"score": 4.0, "max_score": 4.0}
    refused = _grader(project, "new-component", "rmsnorm", "--points", "1", check=False)
    assert refused.returncode == 2 and "rmsnorm is a component already" in refused.stderr


@pytest.fixture(scope="module")
def filled(project) -> Path:
    """The copy with RMSNorm filled in from the fixture, its stub and copies regenerated."""
    for path, name in FILLED.items():
        (project / path).write_text((FIXTURE / name).read_text())
    for path, (skeleton, text) in EDITED.items():
        before = (project / path).read_text()
        assert before.count(skeleton) == 1, path
        (project / path).write_text(before.replace(skeleton, text))
    _grader(project, "release-stubs")
    _grader(project, "generate")
    return project


@pytest.mark.slow
def test_a_filled_in_component_goes_through_the_whole_pipeline(filled, tmp_path):
    assert HAND_EDITED == 8
    card = tmp_path / "card.json"
    _grader(filled, "grade", "solutions", "--json", str(card))
    graded = json.loads(card.read_text())
    failed = [f"{t['name']}: {t['message']}" for t in graded["tests"] if t["status"] != "passed"]
    assert not failed and graded["score"] == graded["max_score"] == 104
    selftest = _grader(filled, "selftest", "--only", "rmsnorm").stdout
    assert "ok   bug rmsnorm_sum_not_mean" in selftest and "ok   correct example" in selftest

    release = tmp_path / "release"
    _grader(filled, "release", "--out", str(release))
    stub = (release / "exercises" / "rmsnorm.py").read_text()
    assert "class RMSNorm" in stub and "rsqrt" not in stub and "NotImplementedError" in stub
    assert not (release / "solutions").exists() and not (release / "grader" / "suites" / "hidden").exists()
    assert (release / "grader" / "suites" / "public" / "rmsnorm.py").is_file()
    notebook = json.loads((release / "lab.ipynb").read_text())
    sources = ["".join(cell["source"]) for cell in notebook["cells"]]
    assert any(s.startswith("%%writefile rmsnorm.py") and "rsqrt" not in s for s in sources)
    assert any(s.startswith("## Part 4 — Rmsnorm") and "(R1)" in s for s in sources)
    assert any("check . --only rmsnorm" in s for s in sources)

