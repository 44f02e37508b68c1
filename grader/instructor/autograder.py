"""`grader autograder --out autograder.zip`: the Gradescope autograder, a zip to upload as it is.

At its top level (Gradescope's layout, https://gradescope-autograders.readthedocs.io/en/latest/specs/):
- setup.sh: Gradescope runs it once, as root, when it builds the image: Python 3.11+, CPU torch
  and the grader, all into ROOT/venv (nothing is downloaded at grading time);
- run_autograder: run for each submission: `python -m grader.instructor.gradescope ROOT` (gradescope.py);
- autograder.json: the bundle's settings (the hidden tests' visibility, the time limits' scale,
  Gradescope's timeout that the grading must end within, whether it grades without a sandbox
  where none runs: --unsafe-no-sandbox, and the list of cases: results.json needs their names,
  visibility and docs, and run_autograder then imports no torch of its own);
- salt: this deployment's salt (grader/salt.py), so that Gradescope draws the hidden inputs that
  `grader grade` draws here: the same submission gets the same score in both places;
- constraints.txt: the project's (CONSTRAINTS): the exact version of every package the grader installs,
  which setup.sh installs, on this Python's minor version; the bundle is refused where the versions
  installed here that decide those inputs and the results (PINNED) are not the file's;
- pyproject.toml, README.md, grader/ (with the hidden suites) and solutions/: what setup.sh installs.

ROOT is AUTOGRADER_ROOT, default /autograder; Gradescope unzips the bundle into ROOT/source.
"""
import json
import os
import re
import tempfile
from pathlib import Path

from ..archive import deterministic_zip
from ..salt import deployment_salt
from ..secret import HIDDEN_SUITES_PATH, PACKAGES, SALT_PATH
from .gradescope import (
    DEFAULT_HIDDEN_VISIBILITY,
    DEFAULT_TIMEOUT,
    TIMEOUTS,
    VISIBILITIES,
    catalogue,
    minimum_time_limit,
    minimum_timeout,
    time_limit,
)
from .release import INSTRUCTOR_ONLY, JUNK
from .runner import PINNED, pins

REPO = Path(__file__).resolve().parents[2]
FILES = ("pyproject.toml", "README.md")
LEFT_OUT = (SALT_PATH.as_posix(),)
"""The salt travels as the bundle's `salt` file (the installed package does not hold it)."""
CONSTRAINTS = "constraints.txt"
"""The exact version of every package the grader and its tests install (`pip freeze` of README's quick start,
less the project itself and torch's "+cpu"): README's quick start (so CI) and setup.sh install under it,
and tests/autograder/instructor/test_constraints.py fails where the installed set differs."""
UV_VERSION = "0.13.9"
"""The uv that setup.sh installs (with pip) to install Python; its version decides Python's patch release."""

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root and with network access, while it builds the autograder's
# image: everything grading needs is installed now, so that run_autograder downloads nothing.
#
# Python: uv (installed with pip, at an exact version) installs its own CPython build, the same
# minor version as the instructor's (@PYTHON@), on any image: Ubuntu 22.04, Gradescope's default,
# has Python 3.10 and a release candidate as python3.11; other images have no Python 3.11 at all.
# Every package is pinned (constraints.txt, the set CI tests). torch alone comes from PyTorch's CPU index
# (--no-deps: that index lacks most versions of torch's dependencies), the rest from PyPI.
set -euo pipefail
cd /  # nothing depends on the folder Gradescope runs this from (no ./grader shadows the installed one)
root="${AUTOGRADER_ROOT:-/autograder}"
source="$root/source"
supported="Linux on x86_64 or aarch64 (glibc), with python3 and pip or apt-get/dnf to install them: \\
Gradescope's Ubuntu 20.04, 22.04 and 24.04 images, Fedora, Rocky"
fail() {
    echo "setup.sh: $*" >&2
    exit 1
}
trap 'fail "line $LINENO failed (see above); this installer supports $supported"' ERR

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64 | Linux-aarch64) ;;
    *) fail "$(uname -s) on $(uname -m) is not supported: $supported" ;;
esac
bootstrap=""
if command -v python3 >/dev/null && python3 -I -c "import pip" 2>/dev/null; then
    bootstrap=python3
elif command -v apt-get >/dev/null; then
    apt-get update && apt-get install -y --no-install-recommends python3-pip
    bootstrap=python3
elif command -v dnf >/dev/null; then
    dnf install -y python3-pip
    bootstrap=python3
else
    fail "no python3 with pip on this image, and no apt-get or dnf to install it: $supported"
fi
# uv beside the system's packages (--target), not among them: the system's Python stays as it was
"$bootstrap" -I -m pip install --no-cache-dir --disable-pip-version-check --target "$root/uv" "uv==@UV@"
uv="$root/uv/bin/uv"
export UV_PYTHON_INSTALL_DIR="$root/python" UV_CACHE_DIR="$root/uv-cache" UV_NO_CONFIG=1
"$uv" venv --python "cpython@@PYTHON@" --python-preference "${UV_PYTHON_PREFERENCE:-only-managed}" \\
    "$root/venv"
python="$root/venv/bin/python"
released="import sys; assert sys.version_info >= (3, 11) and sys.version_info.releaselevel == 'final'"
"$python" -I -c "$released" || fail "$("$python" -I -V) is not a released Python 3.11 or newer"
pins=(--python "$python" --constraint "$source/constraints.txt")
"$uv" pip install "${pins[@]}" --no-deps torch --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
"$uv" pip install "${pins[@]}" "$source"
rm -rf "$UV_CACHE_DIR"

# Only root (the judge) may read the reference, the hidden tests and the salt: the bundle, and what
# of the installed grader the student release leaves out (a worker, as another user, runs a copy of
# the sandbox's code: the rest of the grader stays readable).
chmod -R go= "$source"
installed="$("$python" -I -c "import grader, os; print(os.path.dirname(*grader.__path__))")"
case "$installed" in
    "$root/venv/"*) ;;
    *) fail "the grader imported from $installed, not from $root/venv" ;;
esac
(cd "$installed" && chmod -R go= @PRIVATE@)
echo "setup.sh: $("$python" -I -V) and the grader in $root/venv"
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


def constraints(repo: Path = REPO) -> str:
    """The bundle's constraints file, the project's, once each of PINNED installed here is checked to be
    the file's version (else Gradescope would draw other hidden inputs, or compute other results, than
    `grader grade` here)."""
    text = (repo / CONSTRAINTS).read_text()
    pinned = pinned_versions(text)
    wrong = [f"{name} {pins()[name]} (the file: {pinned.get(name, 'none')})" for name in PINNED
             if pinned.get(name) != pins()[name]]
    if wrong:
        raise AutograderError(f"installed here, not as {CONSTRAINTS} pins: {', '.join(wrong)}; install from "
                              f"it first: pip install -c {CONSTRAINTS} -e \".[instructor]\"")
    return text


def pinned_versions(text: str) -> dict[str, str]:
    """A constraints file's `name==version` lines, by normalized name (PEP 503)."""
    lines = (line.split("#")[0].strip() for line in text.splitlines())
    return {re.sub(r"[-_.]+", "-", name).lower(): version
            for name, _, version in (line.partition("==") for line in lines if line)}


def setup_script(private: str) -> str:
    """setup.sh for this machine's Python minor version, `private` the installed paths to lock."""
    python = pins()["python"]
    return SETUP.replace("@PRIVATE@", private).replace("@PYTHON@", python).replace("@UV@", UV_VERSION)


def build_autograder(out: Path, *, hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY,
                     timeout_scale: float = 1.0, timeout: float = DEFAULT_TIMEOUT, force: bool = False,
                     repo: Path = REPO, unsafe_no_sandbox: bool = False) -> Path:
    """Write the Gradescope bundle to `out` (a zip; an existing file only with `force`); returns it."""
    out, repo = Path(out).resolve(), Path(repo).resolve()
    if hidden_visibility not in VISIBILITIES:
        raise AutograderError(f"--hidden-visibility {hidden_visibility}: one of {', '.join(VISIBILITIES)}")
    if not timeout_scale > 0:
        raise AutograderError(f"--timeout-scale {timeout_scale}: a positive factor")
    if not TIMEOUTS[0] <= timeout <= TIMEOUTS[1]:
        raise AutograderError(f"--timeout {timeout:g}: Gradescope's timeout in seconds, from {TIMEOUTS[0]:g} "
                              f"to {TIMEOUTS[1]:g} (its maximum, 40 minutes)")
    if timeout < (needed := minimum_timeout(timeout_scale)):
        raise AutograderError(f"--timeout {timeout:g} at --timeout-scale {timeout_scale:g} leaves the "
                              f"grading {time_limit(timeout):g} s, less than the reference's own grading "
                              f"needs ({minimum_time_limit(timeout_scale):g} s): correct work would lose the "
                              f"tests with no time left. Use --timeout {needed:g} or more")
    for needed in (Path("solutions"), HIDDEN_SUITES_PATH):
        if not (repo / needed).is_dir():
            raise AutograderError(f"no {repo / needed}: grading needs the reference and hidden tests")
    if out.is_dir() or (out.exists() and not force):
        raise AutograderError(f"{out} exists" + ("" if out.is_dir() else ": --force replaces it"))
    if not out.parent.is_dir():
        raise AutograderError(f"no folder {out.parent} to write {out.name} in")
    from ..suites import all_cases

    settings = {"hidden_visibility": hidden_visibility, "timeout_scale": timeout_scale, "timeout": timeout,
                "unsafe_no_sandbox": unsafe_no_sandbox, "cases": catalogue(all_cases())}
    # Written whole, then renamed into place; mode 0600 (not atomic.write_atomic's 0644): it holds the
    # reference and the salt.
    with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}-", delete=False) as new:
        try:
            private = " ".join(("solutions", *map(str, INSTRUCTOR_ONLY)))
            files = [("setup.sh", setup_script(private).encode()),
                     ("run_autograder", RUN.encode()),
                     ("autograder.json", (json.dumps(settings, indent=2) + "\n").encode()),
                     ("salt", (deployment_salt() + "\n").encode()),
                     (CONSTRAINTS, constraints(repo).encode()),
                     *((path.as_posix(), (repo / path).read_bytes()) for path in _sources(repo))]
            new.write(deterministic_zip(files, executable=("setup.sh", "run_autograder")))
        except BaseException:
            os.unlink(new.name)
            raise
    os.replace(new.name, out)
    return out
