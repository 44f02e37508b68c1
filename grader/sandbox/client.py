"""The judge's side of the sandbox: confine, start, call, time out and replace worker processes.

Each worker is a fresh interpreter (not a fork of the judge, which holds the reference), confined
as the machine allows (`mode()`, docs/grading.md "Threat model"), with its output going to a capped
log file rather than to the judge. A crash, exit, hang or oversized reply costs the call that
caused it (WorkerLost); the next call starts a new worker. When a worker is done with or lost,
it and every process it started are killed before anything else happens.

The judge talks to a worker over the worker's stdin and stdout (a Channel: every read and write
has a deadline); the worker's own output goes to its log. Linux, macOS and Windows all run it
("plain" mode off Linux), each with the limits it supports (jail.py).
"""
import contextlib
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

import psutil

from ..results import safe_text
from ..spec import BUDGETS, UNSAFE_FLAG
from ..submission import special
from . import seccomp
from .cgroup import Group
from .jail import SANDBOX, Confinement, Limits
from .protocol import Channel, Deadline, ProtocolError

MODE_VARIABLE = "GRADER_SANDBOX"
"""Overrides mode(): "root", "setuid", "userns" or "plain" (tests, or a machine whose probe misleads)."""
MODES = {
    "root": "own uid; a new root without the grader, the reference or your files; no network; "
            "own PID namespace",
    "userns": "a new root without the grader, the reference or your files; no capabilities; no network; "
              "own PID namespace",
    "setuid": "own uid; no network (seccomp); sees the machine's files (the reference, hidden tests and "
              "salt are checked private to root) and its process list",
    "plain": "resource limits only: the code runs as you, with your files and the network",
}
"""Each mode, strongest first, and what it isolates (every report says it; docs/grading.md, Threat model)."""
CODE_PACKAGE = "grader_sandbox"
"""The name of the worker's copy of this package (all the code it runs besides Python's and torch's)."""
_WORKER_CODE = ("__init__.py", "eager.py", "forbidden.py", "jail.py", "loader.py", "protocol.py",
                "seccomp.py", "worker.py")
_UID_BASE, _UID_SPAN = 1 << 30, 1 << 26  # pid (< 2^22) * 16 + a counter: unique to one worker
_NOGROUP = 65534
_OVERFLOW = frozenset({0, 65534, 65535})  # root, nobody, and the overflow uid (what unmapped ones show as)
_HIDDEN_PACKAGES = ("grader", "solutions")
_uids = itertools.count()
_NAMESPACES = ["--net", "--ipc", "--pid", "--fork", "--kill-child"]
"""No network; SysV IPC and message queues of its own (gone with it); every process dies with the first."""
_LOG_TAIL_BYTES = 2000
_WINDOWS_VARIABLES = ("SYSTEMROOT", "PATH")
"""What Python needs of the environment on Windows (SYSTEMROOT: its random numbers; PATH: DLLs)."""


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here as asked: the message says why and what to do."""


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
    unprivileged uid and seccomp), "userns" (not root, or root of a user namespace that maps no
    other uid: namespaces and the same new root) or "plain" (limits only). GRADER_SANDBOX overrides
    the choice; a value that is not a mode is an error (SandboxUnavailable), never a weaker mode."""
    asked = os.environ.get(MODE_VARIABLE, "")
    if asked:
        if asked not in MODES:
            raise SandboxUnavailable(f"{MODE_VARIABLE}={asked!r} is not a sandbox mode: choose one of "
                                     f"{', '.join(MODES)} (or unset it to take the strongest that works)")
        return asked
    if sys.platform != "linux":  # namespaces, setuid workers and /proc are Linux's
        return "plain"
    if os.geteuid() == 0 and _uid_pool() is not None:
        return "root" if _runs([*_launcher("root"), "true"]) else "setuid"
    return "userns" if _runs([*_launcher("userns"), "true"]) else "plain"


def sandbox_mode(hidden: bool, unsafe_no_sandbox: bool = False) -> str:
    """The mode a grading runs in, once it is known to start: SandboxUnavailable says why not.

    `hidden`: the grading runs hidden tests (`grader grade`, grade-all, the autograder), which
    "plain" mode cannot keep hidden: it is refused unless `unsafe_no_sandbox` says otherwise.
    """
    chosen = mode()
    problem = _problem(chosen)
    if problem:
        raise SandboxUnavailable(f"the sandbox cannot run in {chosen!r} mode here: {problem}")
    if chosen == "plain" and hidden and not unsafe_no_sandbox:
        raise SandboxUnavailable(
            "no sandbox here ('plain' mode: not root, and user namespaces are refused): the submission's "
            "code would run as you, able to read the reference, the hidden tests and the salt. Grade as root "
            f"or where user namespaces are allowed, or pass {UNSAFE_FLAG} (the report says so)")
    return chosen


def describe(confinement_mode: str, unsafe_no_sandbox: bool = False) -> dict:
    """What a report says of the sandbox: the mode and what it isolates."""
    unsafe = confinement_mode == "plain" and unsafe_no_sandbox
    return {"mode": confinement_mode,
            "isolates": MODES[confinement_mode] + (f" ({UNSAFE_FLAG})" if unsafe else "")}


@functools.cache
def _problem(confinement_mode: str) -> str:
    """Why workers cannot start in this mode here ("" if they can)."""
    if confinement_mode in ("root", "setuid"):
        if os.geteuid() != 0:
            return "it needs the grader to run as root"
        if _uid_pool() is None:
            return "this user namespace maps no uid for the worker besides root (/proc/self/uid_map)"
    if confinement_mode == "root" and not _runs([*_launcher("root"), "true"]):
        return "new mount, network and PID namespaces are refused (`unshare` failed): try 'setuid'"
    if confinement_mode == "userns" and not _runs([*_launcher("userns"), "true"]):
        return "user namespaces are refused (`unshare --user` failed)"
    if confinement_mode == "setuid":
        return _setuid_problem()
    return ""


def _launcher(confinement_mode: str) -> list[str]:
    # The judge's death kills unshare, whose death kills the namespace.
    if confinement_mode == "root":
        return ["setpriv", "--pdeathsig", "KILL", "unshare", "--mount", "--propagation", "private",
                *_NAMESPACES, "--"]
    if confinement_mode == "userns":
        return ["setpriv", "--pdeathsig", "KILL", "unshare", "--user", "--map-root-user", "--mount",
                "--propagation", "private", *_NAMESPACES, "--"]
    return []


def _id_ranges(id_map: str) -> list[range]:
    """The ids a user namespace maps (/proc/self/uid_map: "inside outside count" per line)."""
    ranges = []
    for line in id_map.splitlines():
        inside, _, count = map(int, line.split())
        ranges.append(range(inside, inside + count))
    return ranges


def uid_pool(uid_map: str) -> range | None:
    """The uids workers get, among those mapped: 2^30 + 2^26 where all are (a machine, a container
    sharing the host's), else the upper half of the largest range (a rootless or user-namespaced
    container maps 65536: the lower half is left to the image's own users); None if too few."""
    ranges = _id_ranges(uid_map)
    if any(_UID_BASE in r and _UID_BASE + _UID_SPAN - 1 in r for r in ranges):
        return range(_UID_BASE, _UID_BASE + _UID_SPAN)
    largest = max(ranges, key=len, default=range(0))
    pool = range(largest.start + len(largest) // 2, largest.stop)
    return pool if len(pool) >= 64 else None


@functools.cache
def _uid_pool() -> range | None:
    return uid_pool(Path("/proc/self/uid_map").read_text())


@functools.cache
def _worker_gid() -> int:
    """nogroup where this user namespace maps it, else a gid of the worker's pool."""
    ranges = _id_ranges(Path("/proc/self/gid_map").read_text())
    if any(_NOGROUP in r for r in ranges):
        return _NOGROUP
    pool = uid_pool(Path("/proc/self/gid_map").read_text())
    return pool.stop - 1 if pool else 0


_PROBE = ("import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'rb').close()\n"
          "        print(path)\n    except OSError:\n        pass\n")


@functools.cache
def _setuid_problem() -> str:
    """What a worker's uid could read that it must not, or could not read that it needs (a
    process started as that uid tries them)."""
    if not seccomp.supported():
        return f"no seccomp filter for this machine ({os.uname().machine}) to take the network away"
    secrets, needed = secret_files(), _needed_files()
    uid = _pool_uids()[0]
    try:
        done = subprocess.run([sys.executable, "-S", "-c", _PROBE, *needed, *map(str, secrets)],
                              user=uid, group=_worker_gid(), extra_groups=[], cwd="/", capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    except PermissionError:
        return (f"python at {os.path.realpath(sys.executable)} is not readable by the worker's uid ({uid}): "
                "install it where every user can run it (chmod o+rx on it and its folders)")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"python at {sys.executable} does not start as the worker's uid ({uid}): {last}"
    readable = set(done.stdout.splitlines())
    missing = [path for path in needed if path not in readable]
    if missing:
        return f"{missing[0]} is not readable by the worker's uid ({uid}): make Python, torch and numpy " \
               "readable by every user"
    leaked = [path for path in map(str, secrets) if path in readable]
    if leaked:
        folders = " ".join(sorted({str(_secret_root(Path(path))) for path in leaked}))
        return (f"the worker's uid ({uid}) could read {len(leaked)} file(s) of the reference, the hidden "
                f"tests or the salt (e.g. {leaked[0]}): make them private to root first: "
                f"chmod -R go= {folders}")
    return ""


def _needed_files() -> list[str]:
    """Files the worker reads after it has dropped to its uid: Python's and torch's and numpy's."""
    return [str(Path(os.__file__))] + [str(folder / "__init__.py") for name in ("torch", "numpy")
                                       if (folder := _module_folder(name)) is not None]


def secret_files() -> list[Path]:
    """Every file of the reference, the hidden suites and the salt, wherever they are installed."""
    return [path for root in _secret_roots() for path in sorted(root.rglob("*")) if path.is_file()]


def _secret_roots() -> list[Path]:
    roots = [_module_folder("solutions")]
    grader = _module_folder("grader")
    if grader is not None:
        roots.append(grader / "suites" / "hidden")
    return [root for root in roots if root is not None and root.is_dir()]


def _secret_root(path: Path) -> Path:
    return next(root for root in _secret_roots() if path.is_relative_to(root))


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


def _pool_uids() -> list[int]:
    """Where this judge's workers look for a uid first: its pid and a counter (a judge runs one
    worker at a time; 16 sandboxes of one process may overlap), within the pool."""
    pool = _uid_pool()
    start = (os.getpid() << 4 | next(_uids) & 15) % len(pool)
    return [uid for uid in (pool[(start + step) % len(pool)] for step in range(64)) if uid not in _OVERFLOW]


def _worker_uid() -> int:
    """A uid no process uses now: in the 2^30 pool, the first place tried is this worker's alone;
    in a container's smaller pool, two judges may meet, and a uid in use is passed over."""
    candidates = _pool_uids()
    if len(_uid_pool()) >= _UID_SPAN:
        return candidates[0]
    in_use = {_uid_of(entry) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    return next((uid for uid in candidates if uid not in in_use), candidates[0])


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


def _kill_tree(pid: int) -> None:
    """Kill a process and every process it started: its process group where the platform has them
    (it leads one), and each descendant found, those that left the group too (on Windows, the only way)."""
    try:
        root = psutil.Process(pid)
        descendants = root.children(recursive=True)
    except psutil.Error:
        return
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for process in (root, *descendants):
        with contextlib.suppress(psutil.Error):
            process.kill()


def _uid_of(process: Path) -> int | None:
    try:
        for line in (process / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


_ISOLATION = {
    "root": "your code runs in a separate process, as a user of its own, with no network and no view of "
            "other files",
    "setuid": "your code runs in a separate process, as a user of its own",
    "userns": "your code runs in a separate process, in namespaces of its own (no network)",
    "plain": "your code runs in a separate process",
}


def isolation_summary(confinement_mode: str, not_set: list[str]) -> str:
    """One line for the student: how their code is isolated, and which limits this platform refused."""
    memory = not any(note.startswith("memory") for note in not_set)
    text = f"{_ISOLATION[confinement_mode]}, with time{' and memory' if memory else ''} limits"
    return text + (f" (not available here: {'; '.join(not_set)})" if not_set else "")


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
            os.chown(home, self.uid, _worker_gid())
        confinement = Confinement(self.mode, root=tempfile.mkdtemp(prefix="root-", dir=area),
                                  read_only=[*_visible_paths(), str(area / "code")],
                                  masked=list(_hidden_paths()),
                                  submission=str(area / "submission"), home=str(home),
                                  uid=self.uid or 0, gid=_worker_gid() if self.uid else 0, limits=limits)
        in_jail = self.mode in ("root", "userns")
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
        if sys.platform == "win32":
            env |= {name: os.environ[name] for name in _WINDOWS_VARIABLES if name in os.environ}
        log_fd, log_name = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=area.parent)
        self.log_path = Path(log_name)
        # One control group for it and all it starts, where the machine allows (as root)
        self.group = Group.create(limits.group_memory_bytes, limits.processes, limits.cpus) \
            if self.uid is not None else None
        command = [*(self.group.join_command() if self.group else []), *_launcher(self.mode), sys.executable,
                   "-P", "-s", "-m", f"{CODE_PACKAGE}.jail", confinement.to_json(), confinement.submission,
                   ",".join(sorted(blocked))]
        try:  # start_new_session: a process group of its own on POSIX (Windows ignores it)
            self.process = subprocess.Popen(command, bufsize=0, env=env, cwd=home, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log_fd, start_new_session=True)
        except OSError:
            if self.group:
                self.group.remove()
            raise
        finally:
            os.close(log_fd)
        self.channel = Channel(self.process.stdin, self.process.stdout)
        self._ready = False
        self.not_set: list[str] = []
        """The limits the worker could not set on this platform (its first message says)."""

    def request(self, message: dict, timeout: float) -> Any:
        """Send one request and return its reply's "ok" value; StudentError or WorkerLost otherwise."""
        self.wait_ready()  # start-up is not charged to the call
        try:
            deadline = time.monotonic() + timeout
            self.channel.send(message, deadline)
            reply = self.channel.receive(deadline)
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
        """Block until the worker has imported what it needs (its first message); WorkerLost, with
        the end of its log, if it could not."""
        if self._ready:
            return
        try:
            first = self.channel.receive(time.monotonic() + BUDGETS.worker_start)
            if not (isinstance(first, dict) and first.get("ready") is True
                    and isinstance(first.get("not_set"), list)):
                raise ProtocolError("its first message is not the one it sends when ready")
        except (Deadline, EOFError, OSError, ProtocolError) as error:
            self.close()  # first: then its log says all it will
            tail = self.log_tail()
            raise WorkerLost(f"the worker could not start: {error}"
                             + (f"; its log ends with:\n{tail}" if tail else " (its log is empty)")) from None
        self.not_set = [safe_text(text, 200) for text in first["not_set"][:10]]
        self._ready = True

    def log_tail(self) -> str:
        """The end of the worker's log (what it printed, and why it stopped, if it said), safe to show."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
                return safe_text(log.read().decode("utf-8", "replace").strip(), _LOG_TAIL_BYTES)
        except OSError:
            return ""

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
        self.channel.close()

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
            _kill_tree(self.process.pid)


class Sandbox:
    """A worker for one submission, replaced whenever one is lost.

    It copies the submission and the worker's code into a folder of `scratch` that only root can
    write (world-traversable in "setuid" mode, where the worker reaches them by their paths).
    `hidden`: it will run hidden tests (see sandbox_mode); `report` is what reports say of it.
    """

    def __init__(self, submission_dir: Path, scratch: Path, timeout_scale: float = 1.0,
                 limits: Limits | None = None, *, hidden: bool = True, unsafe_no_sandbox: bool = False):
        self.submission_dir, self.scratch = Path(submission_dir), Path(scratch)
        cpu_seconds = BUDGETS.scaled(timeout_scale).worker_cpu_seconds
        self.mode = sandbox_mode(hidden, unsafe_no_sandbox)
        self.limits = limits or Limits(cpu_seconds=cpu_seconds)
        self.report = describe(self.mode, unsafe_no_sandbox)
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
        self.not_set: list[str] = []
        """The limits this platform refused (the last ready worker's word)."""

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
        except WorkerLost:
            self.worker = None
            raise
        self.not_set = self.worker.not_set

    def request(self, message: dict, timeout: float) -> Any:
        self.ready()
        worker = self.worker
        try:
            return worker.request(message, timeout)
        except WorkerLost:
            self.worker = None
            raise

    def isolation(self) -> dict:
        """How this sandbox isolated the student's code, for every report: its mode and what it
        isolates (describe), one line a student can read, and the limits this platform refused."""
        return {**self.report, "summary": isolation_summary(self.mode, self.not_set),
                "not_set": list(self.not_set)}

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
