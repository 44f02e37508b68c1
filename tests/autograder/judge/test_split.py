"""Public and hidden suites apart: the public suites need neither the reference nor the hidden suites.

Statically (nothing under grader/suites/public/, nor what it imports, imports grader.suites.hidden.reference,
solutions or grader.suites.hidden) and for real: a copy of the grader package without
suites/hidden/, run where `solutions` cannot be imported, checks the reference's copy with every
public point and the stubs' copy as "not attempted" everywhere, and refuses to grade.
"""
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.spec import COMPONENTS
from grader.suites import all_cases
from helpers import ROOT

pytestmark = pytest.mark.xdist_group("split")  # its module fixtures are costly: one worker builds them

GRADER = ROOT / "grader"
PUBLIC = GRADER / "suites" / "public"
FORBIDDEN = ("grader.suites.hidden.reference", "solutions", "grader.suites.hidden")


def _module_file(name: str) -> Path | None:
    """The file of `name` if it is a module of the grader package."""
    if name != "grader" and not name.startswith("grader."):
        return None
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, name: str) -> set[str]:
    """Every module name `path` (module `name`) imports, anywhere in it, relative imports resolved;
    `from a import b` counts as a and a.b (b may be a submodule). Also import_module("literal")."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else [])
                base = ".".join(parts)
            else:
                base = node.module
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if function in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def test_every_component_has_a_public_suite():
    assert {path.stem for path in PUBLIC.glob("*.py")} >= set(COMPONENTS)


def test_the_public_suites_import_no_reference_and_no_hidden_suite():
    """Followed through every grader module they import (and the packages those live in)."""
    via: dict[str, str] = {}
    todo = []
    for path in sorted(PUBLIC.glob("*.py")):
        for name in _with_parents(f"grader.suites.public.{path.stem}"):
            via.setdefault(name, "")
            todo.append(name)
    offences = []
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None:
            continue
        for imported in sorted(_imports(path, name)):
            if any(imported == bad or imported.startswith(bad + ".") for bad in FORBIDDEN):
                offences.append(f"{name} imports {imported} (reached from public via: {via[name] or name})")
            for module in _with_parents(imported):
                if module not in via and _module_file(module) is not None:
                    via[module] = f"{via[name] or name} -> {module}"
                    todo.append(module)
    assert not offences, "\n".join(offences)


LAUNCHER = '''\
"""Run `python -m grader.cli ARGS` with only this folder's grader: not the repository's editable
install, and no `solutions` package."""
import importlib.util
import runpy
import sys
from pathlib import Path

here = Path(__file__).resolve().parent


def foreign(entry):
    path = Path(entry or ".").resolve()
    return "__editable__" in str(entry) or (path != here and ((path / "grader").is_dir()
                                                             or (path / "solutions").is_dir()))


sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
sys.path[:] = [entry for entry in sys.path if not foreign(entry)]
sys.path_importer_cache.clear()
import grader  # noqa: E402
if importlib.util.find_spec("solutions") is not None or Path(grader.__file__).resolve().parents[1] != here:
    print(f"ISOLATION FAILED: grader from {grader.__file__}, "
          f"solutions {importlib.util.find_spec('solutions')}", file=sys.stderr)
    sys.exit(99)
sys.argv = ["grader", *sys.argv[1:]]
runpy.run_module("grader.cli", run_name="__main__", alter_sys=True)
'''


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the grader without suites/hidden/, copies of solutions/ and exercises/ as
    submissions (not importable as `solutions`), and the launcher."""
    root = tmp_path_factory.mktemp("release")

    def skip(directory: str, names: list[str]) -> list[str]:
        hidden = Path(directory) == GRADER / "suites"
        return [n for n in names if n == "__pycache__" or n.endswith(".pyc") or (hidden and n == "hidden")]

    shutil.copytree(GRADER, root / "grader", ignore=skip)
    for name in ("solutions", "exercises"):
        shutil.copytree(ROOT / name, root / "submissions" / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (root / "launch.py").write_text(LAUNCHER)
    assert not (root / "grader" / "suites" / "hidden").exists()
    return root


def grader(release: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(release), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "launch.py", *args], cwd=release, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode != 99, done.stderr
    return done


@pytest.mark.slow
@pytest.mark.sandbox
def test_check_gives_the_reference_every_public_point(release: Path):
    done = grader(release, "check", "submissions/solutions", "--json", "out.json")
    assert done.returncode == 0, done.stderr
    card = json.loads((release / "out.json").read_text())
    public = all_cases(public_only=True)
    assert {t["name"] for t in card["tests"]} == {c.name for c in public}
    failed = [f"{t['name']}: {t['status']} {t['message']}" for t in card["tests"] if t["status"] != "passed"]
    assert not failed
    assert card["score"] == card["max_score"] == sum(c.points for c in public)


@pytest.mark.slow
@pytest.mark.sandbox
def test_check_reports_every_stub_component_not_attempted(release: Path):
    done = grader(release, "check", "submissions/exercises", "--json", "stubs.json")
    assert done.returncode == 0, done.stderr
    card = json.loads((release / "stubs.json").read_text())
    assert set(card["components"]) == set(COMPONENTS)
    assert {t["component"] for t in card["tests"]} == set(COMPONENTS)
    assert {t["status"] for t in card["tests"]} == {"not_attempted"}
    assert card["score"] == 0


@pytest.mark.sandbox
def test_grade_refuses_without_the_hidden_tests(release: Path):
    done = grader(release, "grade", "submissions/solutions", "--json", "graded.json")
    assert done.returncode != 0
    assert "hidden tests" in done.stderr
    assert not (release / "graded.json").exists()


@pytest.mark.sandbox
def test_grade_fails_closed_where_the_hidden_suites_are_but_the_reference_is_not(tmp_path: Path):
    out = tmp_path / "grade.json"
    program = ("import sys; sys.modules['solutions'] = None  # as if the reference were not installed\n"
               "from grader.cli import main\n"
               f"sys.exit(main(['grade', {str(ROOT / 'exercises')!r}, '--json', {str(out)!r}]))")
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "reference solutions" in done.stderr and "refusing to grade" in done.stderr
    assert not out.exists()
