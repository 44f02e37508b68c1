"""The judge's side of a sandbox's template (worker/template.py): a process that imports torch once and
forks the sandbox's workers ("root", "userns" and "setuid" modes), and whether this process may fork it
rather than launch it (forks_template).
"""
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .. import salt
from ..secret import PACKAGES, package_folder, secret_roots
from ..spec import BUDGETS
from .cgroup import Group
from .errors import WorkerLost
from .launch import environment, launch, log, tail
from .processes import first_child, inner_pid, kill_launched
from .worker.jail import SANDBOX, Confinement
from .worker.limits import Limits


class Template:
    """The judge's side of template.py: a process that imports torch once and forks this sandbox's workers.

    It gets the new root every worker shares ("root", "userns"), a control group for its own memory (the
    torch its workers share), and a socket whose other end is its stdin; it never runs the submission's
    code. A template that does not answer in time is `lost`: it is killed, and the sandbox starts another.
    """

    def __init__(self, area: Path, confinement_mode: str, limits: Limits, forked: bool = False):
        """`forked`: fork it from this process (template.fork, where forks_template says it may) rather
        than launch an interpreter that imports torch again."""
        self.mode, self.lost, self._ready = confinement_mode, False, False
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control.settimeout(BUDGETS.worker_start * BUDGETS.wall_factor)  # torch's import, when busy
        confinement = Confinement(confinement_mode, root=tempfile.mkdtemp(prefix="root-", dir=area),
                                  read_only=[*_visible_paths(), str(area / "code")],
                                  masked=list(_hidden_paths()), submission=str(area / "submission"),
                                  limits=limits)
        log_fd, self.log_path = log(area, "template-")
        self.group = Group.create(limits.group_memory_bytes, limits.processes, limits.cpus) \
            if confinement_mode in ("root", "setuid") else None
        try:
            if forked:
                from .worker import (
                    template,  # here: it imports fcntl, which Windows lacks (it has no template)
                )
                home = f"{SANDBOX}/home" if confinement_mode in ("root", "userns") else str(area)
                pid = template.fork(confinement, theirs.fileno(), log_fd, environment(area, home), str(area),
                                    self.group)
                self.process: subprocess.Popen | _Forked = _Forked(pid)
            else:
                self.process = launch("template", [confinement.to_json()], confinement_mode, self.group,
                                       area, str(area), theirs.fileno(), log_fd, log_fd)
        except OSError:
            if self.group:
                self.group.remove()
            raise
        finally:
            os.close(log_fd)
            theirs.close()

    def _call(self, message: dict, fds: tuple[int, ...] = ()) -> dict:
        """Send a request and return the template's reply; WorkerLost (and the template lost) if it
        does not give one in time. Its first message (ready: torch imported) comes before the first reply."""
        try:
            socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
            if not self._ready:
                if self._receive() != {"ready": True}:
                    raise ConnectionError("its first message is not the one it sends when ready")
                self._ready = True
            return self._receive()
        except (OSError, ValueError) as error:  # socket.timeout is an OSError
            self.close()
            ending = tail(self.log_path)
            raise WorkerLost(f"the worker could not start (its template: {error or type(error).__name__})"
                             + (f"; its log ends with:\n{ending}" if ending else "")) from None

    def _receive(self) -> dict:
        reply = json.loads(self.control.recv(1 << 16) or b"null")
        if not isinstance(reply, dict):
            raise ConnectionError("it hung up")
        return reply

    def spawn(self, uid: int, gid: int, home: str, blocked: frozenset[str],
              fds: tuple[int, int, int]) -> tuple[int, int]:
        """Fork a worker serving on fds (its request pipe, reply pipe and log); its pid on this machine and
        in the template's namespace."""
        message = {"op": "spawn", "uid": uid, "gid": gid, "home": home, "blocked": sorted(blocked)}
        inner = int(self._call(message, fds)["pid"])
        template = first_child(self.process.pid) if self.mode in ("root", "userns") else self.process.pid
        for pid in map(int, Path(f"/proc/{template}/task/{template}/children").read_text().split()):
            if inner_pid(pid) == inner:
                return pid, inner
        raise WorkerLost("the worker could not start: its template forked no process")

    def end(self, inner: int) -> int | None:
        """Have the template kill what is left of a worker (its pid in the template's namespace) and
        return its exit code as subprocess gives it (None if the template could not say)."""
        if self.lost:
            return None
        try:
            status = self._call({"op": "end", "pid": inner})["status"]
            return None if status is None else os.waitstatus_to_exitcode(int(status))
        except WorkerLost:
            return None

    def close(self) -> None:
        """Kill the template and what it started, and remove its group."""
        self.lost = True
        self.control.close()
        if self.group:
            self.group.kill()
        kill_launched(self.process, self.mode)
        if self.group:
            self.group.remove()


class _Forked:
    """A child forked by this process, as much of subprocess.Popen as kill_launched uses."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def forks_template() -> bool:
    """Whether a sandbox may fork its template from this process, sparing it torch's import. A fork
    carries this process's memory, so only while nothing in it is hidden from the worker: torch imported
    already, the salt not read (a value in the environment, never read, goes with the environment the
    fork replaces: template.fork), no module of the reference or the hidden suites loaded, and no Python
    thread but this one (a lock another thread held would stay held in the fork; OpenBLAS, whose threads
    numpy starts, stops them across a fork, as every template's fork of a worker relies on). So a grading
    forks it before it reads the salt or loads a hidden test (grading.grade); a process that has graded
    once launches it."""
    if "torch" not in sys.modules or salt.read_here() or threading.active_count() > 1:
        return False
    roots = tuple(f"{root}{os.sep}" for root in secret_roots())
    return not any(str(getattr(module, "__file__", None) or "").startswith(roots)
                   for module in list(sys.modules.values()))


@functools.cache
def _visible_paths() -> list[str]:
    """What a worker needs to see in "root" mode: the system, Python, and the site-packages of
    torch and numpy (read-only)."""
    paths = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", sys.base_prefix,
             sys.prefix}
    for package in ("torch", "numpy"):
        folder = package_folder(package)
        if folder is not None:
            paths.add(str(folder.parent))
    return sorted(paths)


@functools.cache
def _hidden_paths() -> list[str]:
    """The grader (its hidden suites, the salt) and the reference, wherever they are installed."""
    return [str(folder) for name in PACKAGES if (folder := package_folder(name)) is not None]
