"""`grader release --out DIR`: the student distribution, a pip-installable folder DIR and DIR.zip.

It holds the grader without what only instructors need (grader/instructor/, this builder among
them, and the hidden suites), the experiments package, the stubs generated from solutions/ (as
exercises/), the handout docs/lab.md as README.md, docs/spec.md (and docs/grading.md, which spec.md links to),
lab.ipynb and a pyproject.toml of its own. Nothing else of the repository ships: no solutions/,
no examples/ (the correct example holds the quiz answers), no tests/, no experiment results.
"""
import json
import re
import shutil
import tempfile
import tomllib
from pathlib import Path

from ..archive import deterministic_zip, folder_files
from ..secret import HIDDEN_SUITES_PATH
from ..stubs import release_stubs
from . import INSTRUCTOR_PATH
from .notebook import write_notebook

REPO = Path(__file__).resolve().parents[2]
PROJECT = "module9-transformer-lab-student"
PACKAGES = ("grader", "experiments")
INSTRUCTOR_ONLY = (INSTRUCTOR_PATH, HIDDEN_SUITES_PATH)
"""What of PACKAGES the release leaves out, with all below: the instructors' package (this builder
among them) and the hidden tests (the door to the reference and the salt among them)."""
DOCS = ("spec.md", "grading.md")
STUDENT_EXTRAS = ("notebook",)
"""The repository's extras that the release offers too (pip install -e ".[notebook]")."""
JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "*.egg-info")
_RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")


def instructor_only(path: Path) -> bool:
    """Whether a path of the repository stays out of the student release."""
    return any(Path(path).is_relative_to(prefix) for prefix in INSTRUCTOR_ONLY)


class ReleaseError(ValueError):
    """The release cannot be written (where asked, or without the reference solutions)."""


def _is_release(folder: Path) -> bool:
    """Whether `folder` holds a release written by build_release (its pyproject names PROJECT)."""
    try:
        return tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"] == PROJECT
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return False


def _check_target(out: Path, archive: Path, force: bool, repo: Path) -> None:
    """Refuse any target whose writing would delete or mix with files that are not a release's."""
    if repo.is_relative_to(out) or any(out.is_relative_to(repo / p) for p in PACKAGES):
        raise ReleaseError(f"--out {out} would hold, or sit inside, the sources it copies: choose another")
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ReleaseError(f"{out} is not empty: --force replaces a previous release there")
        if not _is_release(out):
            raise ReleaseError(f"{out} is not empty and holds no previous release (nothing was deleted): "
                               "choose another --out")
    if archive.exists() and (not force or not archive.is_file()):
        raise ReleaseError(f"{archive} exists: --force replaces it")


def _pyproject(repo: Path) -> str:
    """The release's pyproject.toml: the repository's version, Python versions, dependencies, the
    students' extras, script and plugin commands."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    toml = json.dumps  # a JSON string or list of strings is valid TOML
    lines = ["[build-system]", 'requires = ["setuptools>=68"]', 'build-backend = "setuptools.build_meta"', "",
             "[project]", f"name = {toml(PROJECT)}", f"version = {toml(project['version'])}",
             'description = "Module 9 Transformer lab: the exercises and the public tests (student release)"',
             'readme = "README.md"', f"requires-python = {toml(project['requires-python'])}",
             f"classifiers = {toml(project['classifiers'])}",
             f"dependencies = {toml(project['dependencies'])}", "", "[project.optional-dependencies]"]
    lines += [f"{name} = {toml(project['optional-dependencies'][name])}" for name in STUDENT_EXTRAS]
    lines += ["", "[project.scripts]"]
    lines += [f"{toml(name)} = {toml(target)}" for name, target in project["scripts"].items()]
    for group, points in project.get("entry-points", {}).items():
        lines += ["", f"[project.entry-points.{toml(group)}]"]
        lines += [f"{toml(name)} = {toml(target)}" for name, target in points.items()]
    packages = [name for package in PACKAGES for name in (package, f"{package}.*")]
    lines += ["", "[tool.setuptools.packages.find]", f"include = {toml(packages)}"]
    return "\n".join(lines) + "\n"


def _readme(handout: Path) -> str:
    """The handout, moved from docs/ to the top: its relative links now point into docs/."""
    return _RELATIVE_LINK.sub(lambda link: f"](docs/{link.group(1)})", handout.read_text())


def _assemble(folder: Path, repo: Path) -> None:
    """Write the release's files into the new folder `folder`."""
    def ignore(directory: str, names: list[str]) -> set[str]:
        here = Path(directory).relative_to(repo)
        return set(JUNK(directory, names)) | {n for n in names if instructor_only(here / n)}

    for package in PACKAGES:
        shutil.copytree(repo / package, folder / package, ignore=ignore)
    release_stubs(repo / "solutions", folder / "exercises")
    (folder / "docs").mkdir()
    for name in DOCS:
        shutil.copy2(repo / "docs" / name, folder / "docs" / name)
    (folder / "README.md").write_text(_readme(repo / "docs" / "lab.md"))
    (folder / "pyproject.toml").write_text(_pyproject(repo))
    # From README.md, not docs/lab.md: the notebook sits next to it, so the same links hold.
    write_notebook(folder / "exercises", folder / "README.md", folder / "lab.ipynb")


def _zip(folder: Path, archive: Path) -> None:
    """`folder` as a zip whose entries all sit under folder's name (it unzips to the folder)."""
    archive.write_bytes(deterministic_zip(folder_files(folder, prefix=f"{folder.name}/")))


def build_release(out: Path, *, force: bool = False, repo: Path = REPO) -> Path:
    """Write the student release into `out` and `out`.zip (next to it); returns the zip's path.

    A non-empty `out` or an existing zip is refused unless `force`, and even then only a previous
    release is replaced: a folder of other files is never deleted.
    """
    out, repo = out.resolve(), repo.resolve()
    archive = out.with_name(out.name + ".zip")
    if not (repo / "solutions").is_dir():
        raise ReleaseError(f"no reference solutions in {repo / 'solutions'}: the stubs come from them")
    _check_target(out, archive, force, repo)
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        staging = Path(scratch) / out.name
        _assemble(staging, repo)  # all of it first: a failure leaves `out` as it was
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staging, out)
    _zip(out, archive)
    return archive
