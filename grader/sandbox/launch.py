"""How the judge starts a template or a worker as a new interpreter: its command, its environment (nothing
of the judge's) and its log, a capped file rather than a pipe to the judge.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..results import safe_text
from .cgroup import Group
from .modes import launcher
from .worker.jail import SANDBOX

CODE_PACKAGE = "grader_sandbox"
"""The name of the worker's copy of this package (all the code it runs besides Python's and torch's)."""

_LOG_TAIL_BYTES = 2000

_WINDOWS_VARIABLES = ("SYSTEMROOT", "PATH")
"""What Python needs of the environment on Windows (SYSTEMROOT: its random numbers; PATH: DLLs)."""
_WINDOWS_HOMES = ("USERPROFILE", "TEMP", "TMP", "LOCALAPPDATA")
"""Where Windows programs look for a home and temporary files (os.path.expanduser reads USERPROFILE, not
HOME; tempfile reads TEMP and TMP; torch's and numpy's caches, LOCALAPPDATA): the worker's home."""



def environment(area: Path, home: str) -> dict[str, str]:
    """The environment of a worker (and of a template): nothing of the judge's."""
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "PYTHONPATH": str(area / "code"),
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if sys.platform == "win32":
        env |= {name: os.environ[name] for name in _WINDOWS_VARIABLES if name in os.environ}
        env |= dict.fromkeys(_WINDOWS_HOMES, home)
    return env


def launch(module: str, arguments: list[str], confinement_mode: str, group: Group | None, area: Path,
            cwd: str, stdin: Any, stdout: Any, log_fd: int) -> subprocess.Popen:
    """Start `python -m grader_sandbox.<module>` confined as `confinement_mode` asks (launcher, group)."""
    home = f"{SANDBOX}/home" if confinement_mode in ("root", "userns") else cwd
    command = [*(group.join_command() if group else []), *launcher(confinement_mode), sys.executable,
               "-P", "-s", "-m", f"{CODE_PACKAGE}.{module}", *arguments]
    # start_new_session: a process group of its own on POSIX (Windows ignores it)
    return subprocess.Popen(command, bufsize=0, env=environment(area, home), cwd=cwd, stdin=stdin,
                            stdout=stdout, stderr=log_fd, start_new_session=True)


def log(area: Path, prefix: str) -> tuple[int, Path]:
    """A new log file beside the sandbox's folder (out of the worker's sight): its descriptor and path."""
    log_fd, log_name = tempfile.mkstemp(prefix=prefix, suffix=".log", dir=area.parent)
    return log_fd, Path(log_name)


def tail(path: Path) -> str:
    """The end of a log (what a process printed, and why it stopped, if it said), safe to show."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
            return safe_text(log.read().decode("utf-8", "replace").strip(), _LOG_TAIL_BYTES)
    except OSError:
        return ""
