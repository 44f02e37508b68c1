"""The judge's side of the sandbox: confine, start, call, time out and replace worker processes.

Each worker is a fresh interpreter (not a fork of the judge, which holds the reference), confined
as the machine allows (`mode()`, docs/grading.md "Threat model"), with its output going to a capped
log file rather than to the judge. A crash, exit, hang or oversized reply costs the call that
caused it (WorkerLost); the next call starts a new worker. When a worker is done with or lost,
it and every process it started are killed before anything else happens.
"""
import functools
import importlib.util
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..results import safe_text
from ..spec import BUDGETS
from ..submission import special
from .cgroup import Group
from .jail import SANDBOX, Confinement, Limits
from .protocol import Deadline, ProtocolError, receive, send

MODE_VARIABLE = "GRADER_SANDBOX"
"""Overrides mode(): "root", "setuid", "userns" or "plain" (tests, or a machine whose probe misleads)."""
CODE_PACKAGE = "grader_sandbox"
"""The name of the worker's copy of this package (all the code it runs besides Python's and torch's)."""
_WORKER_CODE = ("__init__.py", "eager.py", "jail.py", "loader.py", "protocol.py", "worker.py")
_UID_BASE = 1 << 30
_NOGROUP = 65534
_HIDDEN_PACKAGES = ("grader", "solutions")
_uids = itertools.count()
_NAMESPACES = ["--net", "--ipc", "--pid", "--fork", "--kill-child"]
"""No network; SysV IPC and message queues of its own (gone with it); every process dies with the first."""


def _runs(command: list[str]) -> bool:
    try:
        return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def mode() -> str:
    """How workers are confined here: "root" (namespaces, a new root, an unprivileged uid),
    "setuid" (root where namespaces are refused, e.g. a container without CAP_SYS_ADMIN: an
    unprivileged uid only), "userns" (not root: namespaces only) or "plain" (limits only)."""
    if os.environ.get(MODE_VARIABLE):
        return os.environ[MODE_VARIABLE]
    if os.geteuid() == 0:
        return "root" if _runs([*_launcher("root"), "true"]) else "setuid"
    return "userns" if _runs(["unshare", "--user", "--map-root-user", *_NAMESPACES, "true"]) else "plain"


def _launcher(confinement_mode: str) -> list[str]:
    if confinement_mode == "root":  # the judge's death kills unshare, whose death kills the namespace
        return ["setpriv", "--pdeathsig", "KILL", "unshare", "--mount", "--propagation", "private",
                *_NAMESPACES, "--"]
    if confinement_mode == "userns":
        return ["unshare", "--user", "--map-root-user", *_NAMESPACES, "--"]
    return []


def _module_folder(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec and spec.origin else None


@functools.cache
def _visible_paths() -> list[str]:
    """What a worker needs to see in "root" mode: the system, Python, and the site-packages of
    torch and numpy (read-only)."""
    paths = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", sys.base_prefix,
             sys.prefix}
    for package in ("torch", "numpy"):
        folder = _module_folder(package)
        if folder is not None:
            paths.add(str(folder.parent))
    return sorted(paths)


@functools.cache
def _hidden_paths() -> list[str]:
    """The grader (its hidden suites, the salt) and the reference, wherever they are installed."""
    return [str(folder) for name in _HIDDEN_PACKAGES if (folder := _module_folder(name)) is not None]


def _readable_by_all(folder: Path) -> None:
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def _left_out(folder: str, names: list[str]) -> set[str]:
    """What a submission's copy leaves out: caches, hidden entries, and FIFOs, devices and sockets,
    never opened (submission.special)."""
    return {name for name in names if name == "__pycache__" or name.startswith(".")
            or special(Path(folder, name))}


def _worker_uid() -> int:
    """A uid no other process uses while this worker lives: this judge's pid and a counter (a judge
    runs one worker at a time; 16 sandboxes of one process may overlap)."""
    return _UID_BASE + (os.getpid() << 4 | next(_uids) & 15)


def _kill_uid(uid: int) -> None:
    """Kill every process of `uid` (the worker's own: nothing else runs as it) until none is left."""
    for _ in range(100):
        found = False
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _uid_of(entry) == uid:
                found = True
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not found:
            return
        time.sleep(0.01)


def _uid_of(process: Path) -> int | None:
    try:
        for line in (process / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class WorkerLost(RuntimeError):
    """The worker crashed, exited, hung past its deadline or broke the protocol."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.timed_out = timed_out


class StudentError(Exception):
    """The student's code raised: type, message and where in their files.

    file and line say which of their files it comes from: the deepest frame in the submission, the
    file a SyntaxError is in, or the submission module an import could not find ("" if none).
    """

    def __init__(self, type_name: str, message: str, where: str = "", file: str = "", line: int = 0):
        type_name, message, where, file = (safe_text(text, 1000)
                                           for text in (type_name, message, where, file))
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.where = type_name, message, where
        self.file, self.line = file, line

    def __str__(self) -> str:
        text = f"{self.type_name}: {self.message}" if self.message else self.type_name
        return f"{text} ({self.where})" if self.where else text


class Worker:
    """One confined worker process serving one submission (never importing its `blocked` modules).

    `area` is the sandbox's folder: area/code (the worker's code) and area/submission (a copy),
    both read-only to the worker; each worker gets a new home folder of its own there.
    """

    def __init__(self, area: Path, blocked: frozenset[str], confinement_mode: str, limits: Limits):
        self.mode = confinement_mode
        self.uid = _worker_uid() if self.mode in ("root", "setuid") else None
        home = Path(tempfile.mkdtemp(prefix="home-", dir=area))
        if self.uid is not None:
            os.chown(home, self.uid, _NOGROUP)
        confinement = Confinement(self.mode, root=tempfile.mkdtemp(prefix="root-", dir=area),
                                  read_only=[*_visible_paths(), str(area / "code")],
                                  masked=list(_hidden_paths()),
                                  submission=str(area / "submission"), home=str(home),
                                  uid=self.uid or 0, gid=_NOGROUP, limits=limits)
        in_jail = self.mode == "root"
        request_read, self._request = os.pipe()
        self._reply, reply_write = os.pipe()
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": f"{SANDBOX}/home" if in_jail else str(home),
            "TMPDIR": f"{SANDBOX}/home" if in_jail else str(home),
            "PYTHONPATH": str(area / "code"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        log_fd, log_name = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=area.parent)
        self.log_path = Path(log_name)
        # One control group for it and all it starts, where the machine allows (as root)
        self.group = Group.create(limits.group_memory_bytes, limits.processes, limits.cpus) \
            if self.uid is not None else None
        command = [*(self.group.join_command() if self.group else []), *_launcher(self.mode), sys.executable,
                   "-P", "-s", "-m", f"{CODE_PACKAGE}.jail", confinement.to_json(), str(request_read),
                   str(reply_write), confinement.submission, ",".join(sorted(blocked))]
        try:
            self.process = subprocess.Popen(command, pass_fds=(request_read, reply_write), env=env, cwd=home,
                                            stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        except OSError:
            if self.group:
                self.group.remove()
            raise
        finally:
            for fd in (log_fd, request_read, reply_write):
                os.close(fd)
        self._ready = False

    def request(self, message: dict, timeout: float) -> Any:
        """Send one request and return its reply's "ok" value; StudentError or WorkerLost otherwise."""
        try:
            self.wait_ready()  # start-up is not charged to the call
            send(self._request, message)
            reply = receive(self._reply, time.monotonic() + timeout)
        except Deadline:
            self.close()
            raise WorkerLost(f"timed out after {timeout:.0f} s (an infinite loop, or far too slow?)",
                             timed_out=True) from None
        except (EOFError, OSError, ProtocolError) as error:
            self.close()
            raise WorkerLost(self._death_reason(error)) from None
        if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
            error = reply["error"]
            line = error.get("line")
            raise StudentError(str(error.get("type")), str(error.get("message")), str(error.get("where")),
                               str(error.get("file", "")), line if type(line) is int else 0)
        if not isinstance(reply, dict) or "ok" not in reply:  # the student's code wrote to the channel
            self.close()
            raise WorkerLost("the worker's reply was refused: it is not a reply")
        return reply["ok"]

    def wait_ready(self) -> None:
        """Block until the worker has imported what it needs (its first message)."""
        if not self._ready:
            receive(self._reply, time.monotonic() + BUDGETS.worker_start)
            self._ready = True

    def _death_reason(self, error: BaseException) -> str:
        code = self.process.returncode
        if isinstance(error, ProtocolError):
            return f"the worker's reply was refused: {error}"
        if code is not None and code < 0:
            return f"the process was killed by signal {signal.Signals(-code).name}"
        if code is not None:
            return f"the process exited with code {code} (os._exit or a crash)"
        return "the process stopped answering"

    def cpu_seconds(self) -> float | None:
        """CPU time the worker and every process it started have used (None without a control group)."""
        return self.group.cpu_seconds() if self.group else None

    def close(self) -> None:
        """Kill the worker and every process it started, wait until they are gone, remove its group."""
        if self.group:
            self.group.kill()
        if self.process.poll() is None:
            self._kill()
        self.process.wait()
        if self.uid is not None:
            _kill_uid(self.uid)  # "setuid" mode has no PID namespace; in "root" mode this finds none
        if self.group:
            self.group.remove()
        for fd in (self._request, self._reply):
            try:
                os.close(fd)
            except OSError:
                pass
        self._request = self._reply = -1

    def _kill(self) -> None:
        if self.mode in ("root", "userns"):
            # The namespace's first process: when it dies the kernel kills the rest, and unshare
            # exits once they are all gone.
            try:
                children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text()
                target = int(children.split()[0]) if children.split() else self.process.pid
            except OSError:
                target = self.process.pid
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Sandbox:
    """A worker for one submission, replaced whenever one is lost.

    It copies the submission and the worker's code into a folder of `scratch` that only root can
    write (world-traversable in "setuid" mode, where the worker reaches them by their paths).
    """

    def __init__(self, submission_dir: Path, scratch: Path, timeout_scale: float = 1.0,
                 limits: Limits | None = None):
        self.submission_dir, self.scratch = Path(submission_dir), Path(scratch)
        cpu_seconds = BUDGETS.scaled(timeout_scale).worker_cpu_seconds
        self.mode, self.limits = mode(), limits or Limits(cpu_seconds=cpu_seconds)
        self.area = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self.scratch))
        shutil.copytree(self.submission_dir, self.area / "submission", symlinks=True, ignore=_left_out)
        shutil.copytree(Path(__file__).parent, self.area / "code" / CODE_PACKAGE,
                        ignore=lambda folder, names: [n for n in names if n not in _WORKER_CODE])
        for folder in ("submission", "code"):  # readable, whatever the originals' modes
            _readable_by_all(self.area / folder)
        if self.mode == "setuid":
            for folder in (self.scratch, self.area):
                folder.chmod(0o711)
        self.worker: Worker | None = None
        self.blocked: frozenset[str] = frozenset()

    def start(self) -> None:
        """Start a worker now, so that its imports overlap the judge's own work."""
        if self.worker is None:
            self.worker = Worker(self.area, self.blocked, self.mode, self.limits)

    def block(self, module: str) -> None:
        """Never import this submission module again: importing it fails at once, in a new worker
        (it may have hung or flooded; the worker that tried it may hold half of it)."""
        self.blocked |= {module}
        self.close()

    def ready(self) -> None:
        """Start a worker if none is running and wait until it can take calls."""
        self.start()
        try:
            self.worker.wait_ready()
        except (Deadline, EOFError, OSError, ProtocolError) as error:
            self.close()
            raise WorkerLost(f"the worker could not start: {error}") from None

    def request(self, message: dict, timeout: float) -> Any:
        self.start()
        worker = self.worker
        try:
            return worker.request(message, timeout)
        except WorkerLost:
            self.worker = None
            raise

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
