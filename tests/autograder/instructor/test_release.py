"""`grader release`: the student distribution holds no answer, and works once pip-installed.

The scan looks for every non-trivial line of the reference's solution blocks, the hidden suites (their
files and their cases' names), the quiz answers, imports of the reference or the hidden tests, and
experiment results. Then the release is unzipped and installed into a fresh virtual environment that
borrows torch & co. from this interpreter's site-packages but not the repository's editable install,
and its own `grader` checks the stubs, checks a copy of the reference, and refuses to grade.
"""
import ast
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.cli import build_parser, command_names
from grader.cli import main as grader_main
from grader.instructor.release import PROJECT, ReleaseError, build_release, instructor_only
from grader.spec import COMPONENTS, Visibility
from grader.stubs import BEGIN, END, stale_stubs, stub_source
from grader.suites import all_cases
from helpers import ROOT

pytestmark = pytest.mark.xdist_group("release")  # its module fixtures are costly: one worker builds them

SOLUTIONS = ROOT / "solutions"
IDIOMS = {"with torch.no_grad():", "model.eval()", "model.train()", "loss.backward()", "optimizer.step()",
          "for x, y in batches:", "logits = model(x)", "if mask is not None:", "if bias is not None:"}
"""Solution lines of plain Python/PyTorch idiom: the public suites and the experiments write them too."""
FORBIDDEN_IMPORTS = ("solutions", "grader.suites.hidden.reference", "grader.suites.hidden")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _docstring_lines(tree: ast.Module) -> set[int]:
    return {n for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str)
            for n in range(node.lineno, node.end_lineno + 1)}


def solution_lines() -> set[str]:
    """Every non-trivial line between the solution markers of solutions/*.py: at least 12 characters
    stripped, code (not a comment, not a docstring), not in the stubs, not a generic idiom."""
    found = set()
    for path in sorted(SOLUTIONS.glob("*.py")):
        source = path.read_text()
        skip = _docstring_lines(ast.parse(source))
        stub = {line.strip() for line in stub_source(source).splitlines()}
        inside = False
        for number, line in enumerate(source.splitlines(), 1):
            text = line.strip()
            if text in (BEGIN, END):
                inside = text == BEGIN
            elif (inside and len(text) >= 12 and not text.startswith("#") and number not in skip
                  and text not in stub and text not in IDIOMS):
                found.add(text)
    return found


def _texts(folder: Path) -> dict[str, str]:
    """Each file's text by its path in the folder; a notebook's is its cells' sources."""
    texts = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if path.suffix == ".ipynb":
            texts[name] = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
        else:
            texts[name] = path.read_text(errors="replace")
    return texts


def _python_sources(folder: Path) -> list[tuple[str, list[str], str]]:
    """(module name, its package's name parts, source) of every .py file and notebook code cell."""
    sources = []
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        package = parts[:-1]
        sources.append((".".join(package if parts[-1] == "__init__" else parts), package, path.read_text()))
    for path in sorted(folder.rglob("*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":  # without its magics (%%writefile) and shell lines (!grader)
                code = "\n".join(line for line in cell.source.splitlines() if not line.startswith(("%", "!")))
                sources.append((f"{path.name}[{i}]", [], code))
    return sources


def _imports(package: list[str], tree: ast.Module) -> set[str]:
    """Every module name the tree imports, relative imports resolved against its package."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def _mapping(node: ast.AST) -> dict | None:
    """The value of a constant dict literal or dict(key=constant, ...) call; None for anything else."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict" and not node.args:
        node = ast.Dict([ast.Constant(k.arg) for k in node.keywords], [k.value for k in node.keywords])
    if isinstance(node, ast.Dict) and None not in node.keys:
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError):  # not constant, or an unhashable key
            return None
    return None


def findings(folder: Path) -> list[str]:
    """What a student release must not hold, as found in `folder`."""
    found = []
    texts = _texts(folder)
    lines = solution_lines()
    hidden = {case.name for case in all_cases() if case.visibility is Visibility.HIDDEN}
    answers = importlib.import_module("solutions.quiz").ANSWERS
    for name, text in texts.items():
        if "suites/hidden" in name or Path(name).name in ("reference.py", "results.md", "results.json"):
            found.append(f"{name}: a file of the hidden tests, the reference or the experiment results")
        found += [f"{name}: solution line {line!r}" for line in sorted(lines) if line in text]
        found += [f"{name}: hidden case {case}" for case in sorted(hidden) if f"def {case}(" in text]
    for module, package, source in _python_sources(folder):
        tree = ast.parse(source)
        if any(_mapping(node) == answers for node in ast.walk(tree)):
            found.append(f"{module}: the quiz answers")
        for name in _imports(package, tree):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_IMPORTS):
                found.append(f"{module}: imports {name}")
    return found


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "lab"
    assert build_release(out) == out.with_name("lab.zip")
    return out


def test_the_scan_finds_solutions_hidden_tests_answers_and_results(tmp_path: Path):
    """Without this, an empty findings() would pass the release for the wrong reason."""
    shutil.copy(SOLUTIONS / "attention.py", tmp_path / "attention.py")
    shutil.copytree(ROOT / "grader" / "suites" / "hidden", tmp_path / "grader" / "suites" / "hidden",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "examples" / "submissions" / "correct" / "quiz.py", tmp_path / "quiz.py")
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "uses.py").write_text("from grader.suites.hidden.reference import ref\n")
    found = "\n".join(findings(tmp_path))
    for expected in ("attention.py: solution line", "grader/suites/hidden/attention.py: a file of the",
                     "hidden case", "quiz: the quiz answers", "results.json: a file",
                     "uses: imports grader.suites.hidden.reference"):
        assert expected in found


def test_the_release_holds_no_answer(release: Path):
    assert not findings(release), "\n".join(findings(release))


def test_the_release_holds_the_student_files_and_nothing_of_the_repository_besides(release: Path):
    assert {p.name for p in release.iterdir()} == {"README.md", "pyproject.toml", "lab.ipynb", "docs",
                                                  "exercises", "grader", "experiments"}
    assert {p.name for p in (release / "docs").iterdir()} == {"spec.md", "grading.md"}
    assert (release / "docs" / "spec.md").read_text() == (ROOT / "docs" / "spec.md").read_text()
    assert not stale_stubs(SOLUTIONS, release / "exercises")
    assert {p.name for p in (release / "exercises").iterdir()} == {p.name for p in SOLUTIONS.glob("*.py")}
    shipped = {p.relative_to(release).as_posix() for p in release.rglob("*.py")}
    repository = {p.relative_to(ROOT).as_posix() for package in ("grader", "experiments")
                  for p in (ROOT / package).rglob("*.py")}
    assert {p for p in shipped if not p.startswith("exercises/")} == {
        p for p in repository if not instructor_only(Path(p))}
    assert not (release / "grader" / "instructor").exists()
    assert not (release / "grader" / "suites" / "hidden").exists()
    junk = [p for p in release.rglob("*") if p.name in ("__pycache__", ".hypothesis") or p.suffix == ".pyc"]
    assert not junk


def test_the_zip_holds_the_folder(release: Path):
    with zipfile.ZipFile(release.with_name("lab.zip")) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    assert entries == {f"lab/{name}": data for name, data in _files(release).items()}


def test_readme_is_the_handout_and_every_relative_link_resolves(release: Path):
    readme = (release / "README.md").read_text()
    assert readme.replace("](docs/", "](") == (ROOT / "docs" / "lab.md").read_text()
    notebook = nbformat.read(release / "lab.ipynb", as_version=4)
    markdown = {release / "README.md": readme, release / "lab.ipynb": "\n".join(
        cell.source for cell in notebook.cells if cell.cell_type == "markdown")}
    markdown |= {path: path.read_text() for path in (release / "docs").glob("*.md")}
    broken = [f"{path.name}: {target}" for path, text in markdown.items() for target in _LINK.findall(text)
              if not re.match(r"[a-z][a-z0-9+.-]*:|#", target)
              and not (path.parent / target.split("#")[0]).exists()]
    assert not broken


def test_pyproject_installs_the_grader_and_the_experiments_with_the_repositorys_dependencies(release: Path):
    ours = tomllib.loads((release / "pyproject.toml").read_text())
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert ours["project"]["name"] == PROJECT and ours["project"]["readme"] == "README.md"
    for key in ("version", "requires-python", "classifiers", "dependencies", "scripts", "entry-points"):
        assert ours["project"][key] == repository[key]
    extras = repository["optional-dependencies"]
    assert ours["project"]["optional-dependencies"] == {"notebook": extras["notebook"]}
    assert ours["tool"]["setuptools"]["packages"]["find"]["include"] == [
        "grader", "grader.*", "experiments", "experiments.*"]


def test_a_non_empty_folder_is_refused_and_only_a_previous_release_is_replaced(tmp_path: Path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my work")
    for force in (False, True):
        with pytest.raises(ReleaseError, match="not empty"):
            build_release(mine, force=force)
    assert _files(mine) == {"notes.txt": b"my work"} and not (tmp_path / "mine.zip").exists()
    assert grader_main(["release", "--out", str(mine)]) == 2
    assert "--force" in capsys.readouterr().err

    out = tmp_path / "lab"
    build_release(out)
    (out / "stray.txt").write_text("left by hand")
    with pytest.raises(ReleaseError, match="--force"):
        build_release(out)
    build_release(out, force=True)
    assert not (out / "stray.txt").exists() and (out / "lab.ipynb").is_file()


def test_an_existing_zip_needs_force_and_the_repository_is_never_a_target(tmp_path: Path):
    (tmp_path / "lab.zip").write_text("not mine to overwrite")
    with pytest.raises(ReleaseError, match="exists"):
        build_release(tmp_path / "lab")
    assert not (tmp_path / "lab").exists()
    for target in (ROOT, ROOT.parent, ROOT / "grader" / "dist"):
        with pytest.raises(ReleaseError, match="sources"):
            build_release(target, force=True)


# The release installed into a fresh virtual environment


def _run(command: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(word) for word in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def installed(release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(venv, the unzipped release, env): the release pip-installed (not editable) from its zip."""
    if importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("pip") is None:
        pytest.skip("installing offline borrows pip and setuptools from this environment, which has none")
    root = tmp_path_factory.mktemp("student")
    with zipfile.ZipFile(release.with_name("lab.zip")) as archive:
        archive.extractall(root)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root, os.environ)
    # Plain path entries, not site.addsitedir: the repository's editable-install hook (a .pth) stays off.
    Path(purelib.stdout.strip(), "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "PYTHONNOUSERSITE": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = _run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                 "--no-cache-dir", root / "lab"], root, env)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv, root / "lab", env


def grader(installed: tuple[Path, Path, dict], *args) -> subprocess.CompletedProcess:
    """The venv's `grader` console script, run in the unzipped release as a student would."""
    venv, folder, env = installed
    return _run([venv / "bin" / "grader", *args], folder, env)


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_venv_runs_the_releases_grader_without_reference_or_hidden_tests(installed, tmp_path: Path):
    venv, _, env = installed
    probe = ("import importlib.util as u, json, grader, experiments, grader.cli; print(json.dumps(["
             "grader.__file__, experiments.__file__, grader.cli.STUDENT_RELEASE, "
             "[u.find_spec(m) is None for m in ('solutions', 'grader.instructor', "
             "'grader.suites.hidden')]]))")
    done = _run([venv / "bin" / "python", "-c", probe], tmp_path, env)
    assert done.returncode == 0, done.stderr
    grader_file, experiments_file, student, absent = json.loads(done.stdout)
    assert Path(grader_file).is_relative_to(venv) and Path(experiments_file).is_relative_to(venv)
    assert student and all(absent)


@pytest.mark.slow
@pytest.mark.sandbox
def test_check_reports_every_stub_component_not_attempted(installed):
    done = grader(installed, "check", "exercises", "--json", "stubs.json")
    assert done.returncode == 0, done.stderr
    card = json.loads((installed[1] / "stubs.json").read_text())
    assert {t["component"] for t in card["tests"]} == set(COMPONENTS) == set(card["components"])
    assert {t["status"] for t in card["tests"]} == {"not_attempted"} and card["score"] == 0


@pytest.mark.slow
@pytest.mark.sandbox
def test_check_gives_a_copy_of_the_reference_every_public_point(installed):
    shutil.copytree(SOLUTIONS, installed[1] / "mine", ignore=shutil.ignore_patterns("__pycache__"))
    done = grader(installed, "check", "mine", "--json", "mine.json")
    assert done.returncode == 0, done.stderr
    card = json.loads((installed[1] / "mine.json").read_text())
    public = all_cases(public_only=True)
    assert [t["name"] for t in card["tests"]] == [case.name for case in public]
    failed = [f"{t['name']}: {t['status']} {t['message']}" for t in card["tests"] if t["status"] != "passed"]
    assert not failed
    assert card["score"] == card["max_score"] == sum(case.points for case in public)


INSTRUCTOR_COMMANDS = command_names(build_parser({}, False)) - command_names(build_parser({}, True))


@pytest.mark.slow
@pytest.mark.sandbox
def test_grade_and_the_instructor_commands_are_refused(installed):
    done = grader(installed, "grade", "exercises", "--json", "graded.json")
    assert done.returncode != 0 and "hidden tests" in done.stderr and "student release" in done.stderr
    assert not (installed[1] / "graded.json").exists()
    for command in ("release-stubs", "release", "autograder", "grade-all"):
        done = grader(installed, command, "--out", "elsewhere")
        assert done.returncode != 0 and "for instructors" in done.stderr
    assert not (installed[1] / "elsewhere").exists()
    listed = set(re.search(r"\{([^}]*)\}", grader(installed, "--help").stdout).group(1).split(","))
    assert "check" in listed and not listed & INSTRUCTOR_COMMANDS, "--help lists only what runs"


@pytest.mark.slow
@pytest.mark.sandbox
def test_list_tests_and_the_experiments_work_in_the_release(installed):
    done = grader(installed, "list-tests")
    assert done.returncode == 0, done.stderr
    assert [re.search(r"\s(\w+): ", line).group(1) for line in done.stdout.splitlines()] == [
        case.name for case in all_cases(public_only=True)]
    done = grader(installed, "experiments", "--impl", "exercises", "--quick", "--only", "cost",
                  "--out", "exp")
    assert done.returncode == 2 and "cost: model.TinyTransformerLM is not implemented yet" in done.stderr
