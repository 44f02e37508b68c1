"""`grader autograder --out autograder.zip`: the Gradescope autograder, a zip to upload as it is.

At its top level (Gradescope's layout, https://gradescope-autograders.readthedocs.io/en/latest/specs/):
- setup.sh: Gradescope runs it once, as root, when it builds the image: Python 3.11+, CPU torch
  and the grader, all into ROOT/venv (nothing is downloaded at grading time);
- run_autograder: run for each submission: `python -m grader.instructor.gradescope ROOT` (gradescope.py);
- autograder.json: the bundle's settings (the hidden tests' visibility, the time limits' scale);
- salt: this deployment's salt (grader/salt.py), so that Gradescope draws the hidden inputs that
  `grader grade` draws here: the same submission gets the same score in both places;
- pyproject.toml, README.md, grader/ (with the hidden suites) and solutions/: what setup.sh installs.

ROOT is AUTOGRADER_ROOT, default /autograder; Gradescope unzips the bundle into ROOT/source.
"""
import json
import os
import tempfile
from pathlib import Path

from ..archive import deterministic_zip
from ..salt import deployment_salt
from .gradescope import DEFAULT_HIDDEN_VISIBILITY, VISIBILITIES
from .release import INSTRUCTOR_ONLY, JUNK

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("grader", "solutions")
FILES = ("pyproject.toml", "README.md")
LEFT_OUT = ("grader/suites/hidden/salt",)
"""The salt travels as the bundle's `salt` file (the installed package does not hold it)."""

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root and with network access, while it builds the autograder's
# image: everything grading needs is installed now, so that run_autograder downloads nothing.
set -euo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"

# Python 3.11 or newer, beside the system's python3 (Gradescope's own harness runs on that one).
python=""
for candidate in python3.11 python3.12 python3.13; do  # 3.11 first: the tests run on it
    if command -v "$candidate" >/dev/null && "$candidate" -c "import ensurepip, venv" 2>/dev/null; then
        python="$candidate"
        break
    fi
done
if [ -z "$python" ]; then  # Ubuntu 22.04, Gradescope's default image, has 3.10 only
    apt-get update
    apt-get install -y python3.11 python3.11-venv
    python=python3.11
fi
"$python" -m venv "$root/venv"
"$root/venv/bin/python" -m pip install --no-cache-dir --upgrade pip
"$root/venv/bin/python" -m pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
"$root/venv/bin/python" -m pip install --no-cache-dir "$root/source"

# Only root (the judge) may read the reference, the hidden tests and the salt: the bundle, and what
# of the installed grader the student release leaves out (a worker, as another user, runs a copy of
# the sandbox's code: the rest of the grader stays readable).
chmod -R go= "$root/source"
cd "$("$root/venv/bin/python" -c "import grader, os; print(os.path.dirname(*grader.__path__))")"
chmod -R go= @PRIVATE@
"""

RUN = """\
#!/usr/bin/env bash
# Gradescope runs this for each submission, as root, in /autograder: it grades ROOT/submission with
# `grader grade` (the student's code runs in the grader's sandbox) and writes
# ROOT/results/results.json (grader/gradescope.py). Arguments go to that step (e.g. --only attention).
set -euo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
if [ -x "$root/venv/bin/python" ]; then  # setup.sh's; without it, the python on PATH (a test's)
    PATH="$root/venv/bin:$PATH"
fi
GRADER_SALT="$(cat "$root/source/salt")"
export GRADER_SALT
exec python -m grader.instructor.gradescope "$root" "$@"
"""


class AutograderError(ValueError):
    """The bundle cannot be written (where asked, or without the reference and hidden tests)."""


def _sources(repo: Path) -> list[Path]:
    """The files of PACKAGES and FILES to install, relative to `repo`, without caches and the salt."""
    found = [Path(name) for name in FILES]
    for package in PACKAGES:
        for directory, folders, files in os.walk(repo / package):
            junk = JUNK(directory, folders + files)
            folders[:] = sorted(name for name in folders if name not in junk)
            here = Path(directory).relative_to(repo)
            found += [here / name for name in sorted(files)
                      if name not in junk and (here / name).as_posix() not in LEFT_OUT]
    return found


def build_autograder(out: Path, *, hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY,
                     timeout_scale: float = 1.0, force: bool = False, repo: Path = REPO) -> Path:
    """Write the Gradescope bundle to `out` (a zip; an existing file only with `force`); returns it."""
    out, repo = Path(out).resolve(), Path(repo).resolve()
    if hidden_visibility not in VISIBILITIES:
        raise AutograderError(f"--hidden-visibility {hidden_visibility}: one of {', '.join(VISIBILITIES)}")
    if not timeout_scale > 0:
        raise AutograderError(f"--timeout-scale {timeout_scale}: a positive factor")
    for needed in ("solutions", "grader/suites/hidden"):
        if not (repo / needed).is_dir():
            raise AutograderError(f"no {repo / needed}: grading needs the reference and hidden tests")
    if out.is_dir() or (out.exists() and not force):
        raise AutograderError(f"{out} exists" + ("" if out.is_dir() else ": --force replaces it"))
    if not out.parent.is_dir():
        raise AutograderError(f"no folder {out.parent} to write {out.name} in")
    settings = {"hidden_visibility": hidden_visibility, "timeout_scale": timeout_scale}
    # Written whole, then renamed into place; mode 0600 (not atomic.write_atomic's 0644): it holds the
    # reference and the salt.
    with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}-", delete=False) as new:
        try:
            private = " ".join(("solutions", *map(str, INSTRUCTOR_ONLY)))
            files = [("setup.sh", SETUP.replace("@PRIVATE@", private).encode()),
                     ("run_autograder", RUN.encode()),
                     ("autograder.json", (json.dumps(settings, indent=2) + "\n").encode()),
                     ("salt", (deployment_salt() + "\n").encode()),
                     *((path.as_posix(), (repo / path).read_bytes()) for path in _sources(repo))]
            new.write(deterministic_zip(files, executable=("setup.sh", "run_autograder")))
        except BaseException:
            os.unlink(new.name)
            raise
    os.replace(new.name, out)
    return out
