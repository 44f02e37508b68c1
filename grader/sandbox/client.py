"""The judge's side of the sandbox: confine, start, call, time out and replace worker processes.

Each worker is a fresh process (never a fork of the judge, which holds the reference): in the confined
modes a fork of its sandbox's Template (template.py: an interpreter that imported torch and never the
submission), in "plain" mode an interpreter of its own; confined as the machine allows (`mode()`,
docs/grading.md "Threat model"), with its output going to a capped log file rather than to the judge.
A crash, exit, hang or oversized reply costs the call that caused it (WorkerLost); the next call
starts a new worker. When a worker is done with or lost, it and every process it started are killed
before anything else happens.

The judge talks to a worker over two pipes (protocol.channel(): every read and write has a deadline);
the worker's own output goes to its log. Linux, macOS and Windows all run it
("plain" mode off Linux), each with the limits it supports (jail.py).

Time limits count the CPU seconds the worker uses (`Sandbox.cpu_seconds`), not the wall clock: a
loaded machine slows a worker down but does not make it use more CPU. A wall-clock backstop,
spec.Budgets.wall_factor times longer, stops a worker that sleeps or waits instead of computing: it
counts the time spent waiting for the worker's reply, less the time the worker itself waited for a CPU
(the kernel's run-queue delay, /proc/PID/task/TID/schedstat), so load does not bring it nearer either.
"""
import contextlib
import functools
import importlib.util
import io
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from .. import salt
from ..results import safe_text
from ..spec import BUDGETS, UNSAFE_FLAG
from ..submission import special
from . import landlock, seccomp
from .cgroup import Group
from .jail import SANDBOX, Confinement, Limits, refused_limits
from .messages import GO, READY, TIME_LIMIT, Op, checked
from .protocol import Deadline, ProtocolError, channel

MODE_VARIABLE = "GRADER_SANDBOX"
"""Overrides mode(): "root", "setuid", "userns" or "plain" (tests, or a machine whose probe misleads)."""
MODES = {
    "root": "own uid; a new root without the grader, the reference or your files; no network; "
            "own PID namespace",
    "userns": "a new root without the grader, the reference or your files; no capabilities; no network; "
              "own PID namespace",
    "setuid": "own uid; no network (seccomp); sees only the files it needs and no other process "
              "(Landlock); the reference, hidden tests and salt are checked private to root",
    "plain": "resource limits only: the code runs as you, with your files and the network",
}
"""Each mode, strongest first, and what it isolates (every report says it; docs/grading.md, Threat model)."""
_SETUID_WITHOUT_LANDLOCK = ("own uid; no network (seccomp); sees the machine's files (the reference, hidden "
                            "tests and salt are checked private to root) and its process list (Landlock "
                            "unavailable here)")
"""What "setuid" mode isolates without Landlock (before Linux 5.13, not enabled, or refused by seccomp)."""
CODE_PACKAGE = "grader_sandbox"
"""The name of the worker's copy of this package (all the code it runs besides Python's and torch's)."""
_WORKER_CODE = ("__init__.py", "eager.py", "forbidden.py", "jail.py", "landlock.py", "loader.py",
                "messages.py", "protocol.py", "seccomp.py", "template.py", "worker.py")
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
_POLL_SECONDS = 0.25
_PROC = Path("/proc/self/stat").is_file()
SEES_STARVATION = Path("/proc/self/schedstat").is_file()
"""Whether the kernel says how long a process waited for a CPU: then the backstop's clock leaves that
out, and reaching it is a fact about the code (it slept), not about the machine."""
_TICKS = os.sysconf("SC_CLK_TCK") if _PROC else 100


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
    isolates = _SETUID_WITHOUT_LANDLOCK if _without_landlock(confinement_mode) else MODES[confinement_mode]
    return {"mode": confinement_mode, "isolates": isolates + (f" ({UNSAFE_FLAG})" if unsafe else "")}


def _without_landlock(confinement_mode: str) -> bool:
    """Whether this is "setuid" mode where Landlock is unavailable: then the worker sees the machine's
    files and process list (it has no new root and no PID namespace: jail.py)."""
    return confinement_mode == "setuid" and not landlock.abi()


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
    """Kill every process of `uid` (the worker's own: nothing else runs as it) until none is left
    (zombies aside: they run nothing)."""
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
    """The uid of a process that can still run; None for a zombie (it has exited: a killed worker's
    first process waits there until the machine's init reaps it, which may take a second)."""
    try:
        status = dict(line.split(":", 1) for line in (process / "status").read_text().splitlines()
                      if ":" in line)
        return None if status["State"].split()[0] in "ZX" else int(status["Uid"].split()[0])
    except (OSError, ValueError, KeyError, IndexError):
        return None


_ISOLATION = {
    "root": "your code runs in a separate process, as a user of its own, with no network and no view of "
            "other files",
    "setuid": "your code runs in a separate process, as a user of its own, with no network and no view of "
              "other files or processes",
    "userns": "your code runs in a separate process, in namespaces of its own (no network)",
    "plain": "your code runs in a separate process",
}
_SETUID_SUMMARY_WITHOUT_LANDLOCK = ("your code runs in a separate process, as a user of its own, with no "
                                    "network but a view of the machine's files and processes")


def isolation_summary(confinement_mode: str, not_set: list[str]) -> str:
    """One line for the student: how their code is isolated, and which limits this platform refused."""
    memory = not any(note.startswith("memory") for note in not_set)
    isolation = _SETUID_SUMMARY_WITHOUT_LANDLOCK if _without_landlock(confinement_mode) \
        else _ISOLATION[confinement_mode]
    text = f"{isolation}, with time{' and memory' if memory else ''} limits"
    return text + (f" (not available here: {'; '.join(not_set)})" if not_set else "")


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (each thread's children, from /proc)."""
    found, todo = [], [pid]
    while todo:
        process = todo.pop()
        found.append(process)
        try:
            for task in Path(f"/proc/{process}/task").iterdir():
                todo += map(int, (task / "children").read_text().split())
        except OSError:
            pass  # gone meanwhile
    return found


def _cpu_of(pid: int) -> float:
    """User and system CPU seconds of one process, with those of its children it has waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(ticks) for ticks in fields[11:15]) / _TICKS  # utime, stime, cutime, cstime


def _scheduled(pids: list[int]) -> tuple[float, float]:
    """Seconds these processes' threads have run, and waited for a CPU (runnable, not running), from
    /proc/PID/task/TID/schedstat; (0, 0) where the kernel does not keep them."""
    ran = waited = 0
    for pid in pids:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                on_cpu, on_queue, _ = (task / "schedstat").read_text().split()
                ran, waited = ran + int(on_cpu), waited + int(on_queue)
        except (OSError, ValueError):
            pass
    return ran / 1e9, waited / 1e9


@dataclass(frozen=True)
class Allowance:
    """Until when calls may run, on the sandbox's two clocks: `cpu` on Sandbox.cpu_seconds() (the
    limit), `waited` on Sandbox.waited (the wall-clock backstop)."""

    cpu: float
    waited: float
    seconds: float
    """The limit, in CPU seconds (for messages)."""


class WorkerLost(RuntimeError):
    """The worker crashed, exited, hung past its deadline or broke the protocol.

    A timed-out worker `stalled` when the wall-clock backstop stopped it before its CPU limit (it was
    starved by a loaded machine, or the judge cannot tell); otherwise it used its CPU time, or slept.
    `function` and `where` say where the student's code was when its time ran out, if it said.
    """

    def __init__(self, reason: str, timeout: str = "", function: str = "", where: str = ""):
        super().__init__(reason)
        self.timeout, self.function, self.where = timeout, function, where

    @property
    def timed_out(self) -> bool:
        return bool(self.timeout)

    @property
    def stalled(self) -> bool:
        return self.timeout == STALLED


CPU, ASLEEP, STALLED = "cpu", "asleep", "stalled"
"""How a call ran out of time (WorkerLost.timeout): it used its CPU seconds; it slept or waited past
the backstop; the backstop passed while it was starved of CPU (or the judge cannot tell which)."""
_REASONS = {CPU: "used up its CPU time (an infinite loop, or far too slow?)",
            ASLEEP: "slept or waited past the wall-clock backstop without computing",
            STALLED: "did not answer within the wall-clock backstop (a machine too loaded?)"}


class _OutOfTime(Exception):
    def __init__(self, timeout: str):
        super().__init__(timeout)
        self.timeout = timeout


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


FORKED_MODES = ("root", "userns", "setuid")
"""The modes whose workers are forked from a template (template.py), which imports torch once per sandbox;
in "plain" mode (macOS, Windows, no namespaces), each worker is an interpreter of its own."""


def _environment(area: Path, home: str) -> dict[str, str]:
    """The environment of a worker (and of a template): nothing of the judge's."""
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "PYTHONPATH": str(area / "code"),
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if sys.platform == "win32":
        env |= {name: os.environ[name] for name in _WINDOWS_VARIABLES if name in os.environ}
    return env


def _launch(module: str, arguments: list[str], confinement_mode: str, group: Group | None, area: Path,
            cwd: str, stdin: Any, stdout: Any, log_fd: int) -> subprocess.Popen:
    """Start `python -m grader_sandbox.<module>` confined as `confinement_mode` asks (launcher, group)."""
    home = f"{SANDBOX}/home" if confinement_mode in ("root", "userns") else cwd
    command = [*(group.join_command() if group else []), *_launcher(confinement_mode), sys.executable,
               "-P", "-s", "-m", f"{CODE_PACKAGE}.{module}", *arguments]
    # start_new_session: a process group of its own on POSIX (Windows ignores it)
    return subprocess.Popen(command, bufsize=0, env=_environment(area, home), cwd=cwd, stdin=stdin,
                            stdout=stdout, stderr=log_fd, start_new_session=True)


def _log(area: Path, prefix: str) -> tuple[int, Path]:
    log_fd, log_name = tempfile.mkstemp(prefix=prefix, suffix=".log", dir=area.parent)
    return log_fd, Path(log_name)


def _tail(path: Path) -> str:
    """The end of a log (what a process printed, and why it stopped, if it said), safe to show."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
            return safe_text(log.read().decode("utf-8", "replace").strip(), _LOG_TAIL_BYTES)
    except OSError:
        return ""


def _kill_launched(process: subprocess.Popen, confinement_mode: str) -> None:
    """Kill a process _launch started and every process it started, and wait for it."""
    if process.poll() is None:
        if confinement_mode in ("root", "userns"):
            # The namespace's first process: when it dies the kernel kills the rest, and unshare
            # exits once they are all gone.
            with contextlib.suppress(ProcessLookupError):
                os.kill(_first_child(process.pid), signal.SIGKILL)
        else:
            _kill_tree(process.pid)
    process.wait()


def _first_child(pid: int) -> int:
    """The first process of a PID namespace unshare made (its child), else `pid` itself."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0]) if children else pid
    except OSError:
        return pid


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
        log_fd, self.log_path = _log(area, "template-")
        self.group = Group.create(limits.group_memory_bytes, limits.processes, limits.cpus) \
            if confinement_mode in ("root", "setuid") else None
        try:
            if forked:
                from . import template  # here: it imports fcntl, which Windows lacks (it has no template)
                home = f"{SANDBOX}/home" if confinement_mode in ("root", "userns") else str(area)
                pid = template.fork(confinement, theirs.fileno(), log_fd, _environment(area, home), str(area),
                                    self.group)
                self.process: subprocess.Popen | _Forked = _Forked(pid)
            else:
                self.process = _launch("template", [confinement.to_json()], confinement_mode, self.group,
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
            tail = _tail(self.log_path)
            raise WorkerLost(f"the worker could not start (its template: {error or type(error).__name__})"
                             + (f"; its log ends with:\n{tail}" if tail else "")) from None

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
        template = _first_child(self.process.pid) if self.mode in ("root", "userns") else self.process.pid
        for pid in map(int, Path(f"/proc/{template}/task/{template}/children").read_text().split()):
            if _inner_pid(pid) == inner:
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
        _kill_launched(self.process, self.mode)
        if self.group:
            self.group.remove()


class _Forked:
    """A child forked by this process, as much of subprocess.Popen as _kill_launched uses."""

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
    roots = tuple(f"{root}{os.sep}" for root in _secret_roots())
    return not any(str(getattr(module, "__file__", None) or "").startswith(roots)
                   for module in list(sys.modules.values()))


def _inner_pid(pid: int) -> int | None:
    """A process's pid in its own (innermost) PID namespace."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in status.splitlines() if line.startswith("NSpid:")), f"NSpid: {pid}")
    return int(line.split()[-1])


class Worker:
    """One confined worker process serving one submission (never importing its `blocked` modules).

    `area` is the sandbox's folder: area/code (the worker's code) and area/submission (a copy),
    both read-only to the worker; each worker gets a new home folder of its own. In FORKED_MODES it is
    forked by the sandbox's `template`; in "plain" mode it is an interpreter of its own.
    """

    def __init__(self, area: Path, blocked: frozenset[str], confinement_mode: str, limits: Limits,
                 refused: tuple[tuple[str, str], ...] = (), template: Template | None = None):
        self.mode, self.refused, self.template = confinement_mode, refused, template
        self.started = time.monotonic()
        self.cpu = self.waited = 0.0  # its clocks since it was ready: CPU seconds used, seconds waited for
        self._cpu_at_ready = 0.0
        self.returncode: int | None = None
        self.uid = _worker_uid() if self.mode in ("root", "setuid") else None
        home = ""  # "root" and "userns": the template mounts each worker a home of its own
        if self.mode in ("setuid", "plain"):
            home = tempfile.mkdtemp(prefix="home-", dir=area)
            if self.uid is not None:
                os.chown(home, self.uid, _worker_gid())
        log_fd, self.log_path = _log(area, "worker-")
        # One control group for it and all it starts, where the machine allows (as root)
        self.group = Group.create(limits.group_memory_bytes, limits.processes, limits.cpus) \
            if self.uid is not None else None
        self._ready, self.process, self.inner_pid = False, None, None
        self._ids = itertools.count(1)
        try:
            if template is None:
                self._start(area, home, blocked, limits, log_fd)
            else:
                self._fork(template, home, blocked, log_fd)
        except BaseException:
            if self.group and template is None:  # a fork that failed is closed already
                self.group.remove()
            raise
        finally:
            os.close(log_fd)

    def _start(self, area: Path, home: str, blocked: frozenset[str], limits: Limits, log_fd: int) -> None:
        """A worker of its own ("plain" mode): jail.py confines it, then serves."""
        confinement = Confinement(self.mode, submission=str(area / "submission"), home=home,
                                  limits=limits)
        arguments = [confinement.to_json(), confinement.submission, ",".join(sorted(blocked))]
        self.process = _launch("jail", arguments, self.mode, None, area, home, subprocess.PIPE,
                               subprocess.PIPE, log_fd)
        self.pid = self.process.pid
        self.channel = channel(self.process.stdin, self.process.stdout)

    def _fork(self, template: Template, home: str, blocked: frozenset[str], log_fd: int) -> None:
        """A worker forked by the template: in its control group before it may import the submission."""
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        self.channel = channel(io.FileIO(requests_write, "wb"), io.FileIO(replies_read, "rb"))
        try:
            self.pid, self.inner_pid = template.spawn(self.uid or 0, _worker_gid() if self.uid else 0, home,
                                                      blocked, (requests_read, replies_write, log_fd))
            if self.group:
                self.group.add(self.pid)
            self.channel.send(GO, time.monotonic() + BUDGETS.worker_start)
        except (OSError, Deadline, WorkerLost) as error:
            self.close()
            raise error if isinstance(error, WorkerLost) else WorkerLost(
                f"the worker could not start: {error}") from None
        finally:
            os.close(requests_read)
            os.close(replies_write)

    def request(self, message: dict, cpu_deadline: float, waited_deadline: float) -> Any:
        """Send one request and return its reply's "ok" value; StudentError or WorkerLost otherwise.
        It may run until the worker's clocks (self.cpu, self.waited) reach these deadlines."""
        self.wait_ready()  # start-up is not charged to the call
        request = {**message, "id": next(self._ids)}
        try:
            self.channel.send(request, time.monotonic() + BUDGETS.worker_start)
            reply = checked(request, self._await(cpu_deadline, waited_deadline))
        except _OutOfTime as out:
            raise self._time_out(request, out.timeout) from None
        except Deadline:  # the request could not even be written
            self.close()
            raise WorkerLost(_REASONS[STALLED], STALLED) from None
        except (EOFError, OSError, ProtocolError) as error:
            self.close()
            raise WorkerLost(self._death_reason(error)) from None
        if "error" in reply:
            error = reply["error"]
            raise StudentError(error["type"], error["message"], error["where"], error["file"], error["line"])
        return reply["ok"]

    def cpu_seconds(self) -> float:
        """CPU seconds the worker and every process it started have used since it was ready: its
        control group's count where it has one (double forks and new sessions included), else the sum
        over its process tree in /proc; where there is neither (macOS), wall-clock seconds since it
        started."""
        used = self.group.cpu_seconds() if self.group else None
        if used is None and _PROC:
            used = sum(map(_cpu_of, _descendants(self.pid)))
        return (time.monotonic() - self.started if used is None else used) - self._cpu_at_ready

    def _await(self, cpu_deadline: float, waited_deadline: float) -> Any:
        """The worker's next message; _OutOfTime once its CPU clock reaches cpu_deadline, or its waited
        clock waited_deadline (the seconds waited, less those it spent waiting for a CPU)."""
        waited, starved, queued_first = 0.0, 0.0, None
        while True:
            # self.cpu, read last, is at most the CPU used: a thread's CPU grows no faster than the clock
            left = min(cpu_deadline - self.cpu, waited_deadline - self.waited - waited + starved)
            start = time.monotonic()
            try:
                reply = self.channel.receive(start + min(max(left, 0.01), _POLL_SECONDS))
            except Deadline:
                waited += time.monotonic() - start
            else:
                self.waited += waited + time.monotonic() - start - starved
                return reply
            self.cpu = self.cpu_seconds()
            queued = _scheduled(_descendants(self.pid))[1]  # a call's first poll sets the zero
            queued_first = queued if queued_first is None else queued_first
            starved = queued - queued_first
            if self.cpu >= cpu_deadline:
                self.waited += waited - starved
                raise _OutOfTime(CPU)
            if self.waited + waited - starved >= waited_deadline:
                self.waited += waited - starved
                raise _OutOfTime(ASLEEP if self._asleep() else STALLED)

    def _asleep(self) -> bool:
        """Whether the worker neither runs nor waits for a CPU (it sleeps, or waits for something
        else) over a short look; False where /proc cannot tell."""
        pids = _descendants(self.pid)
        before = sum(_scheduled(pids))
        time.sleep(BUDGETS.grace)
        return before > 0 and sum(_scheduled(pids)) == before

    def _time_out(self, request: dict, timeout: str) -> WorkerLost:
        """`request` ran out of time: ask the worker where it is (SIGXCPU makes the student's code raise
        there), then kill it."""
        function = where = ""
        if timeout != STALLED and hasattr(signal, "SIGXCPU"):  # POSIX
            self._signal(signal.SIGXCPU)
            try:
                grace = BUDGETS.grace * BUDGETS.wall_factor
                reply = checked(request, self._await(self.cpu + BUDGETS.grace, self.waited + grace))
                error = reply.get("error")
                if error and error["type"] == TIME_LIMIT:
                    function, where = error["function"], error["where"]
            except (_OutOfTime, Deadline, EOFError, OSError, ProtocolError):
                pass  # it did not say (stuck in a C call, or it caught the signal's exception)
        self.close()
        return WorkerLost(_REASONS[timeout], timeout, function, where)

    def wait_ready(self) -> None:
        """Block until the worker has imported what it needs (its first message: within
        BUDGETS.worker_start seconds of its CPU), then tell it the functions it must refuse; WorkerLost,
        with the end of its log, if it could not."""
        if self._ready:
            return
        try:
            try:
                first = self._await(BUDGETS.worker_start, BUDGETS.worker_start * BUDGETS.wall_factor)
            except _OutOfTime:
                raise Deadline("no answer in time") from None
            if first != READY:
                raise ProtocolError("its first message is not the one it sends when ready")
            for function, message in self.refused:
                request = {"op": Op.REFUSE, "function": function, "message": message, "id": next(self._ids)}
                self.channel.send(request, time.monotonic() + BUDGETS.worker_start)
                if "error" in checked(request, self.channel.receive(time.monotonic() + BUDGETS.worker_start)):
                    raise ProtocolError(f"it could not refuse {function}")
        except (Deadline, EOFError, OSError, ProtocolError) as error:
            self.close()  # first: then its log says all it will
            tail = self.log_tail()
            raise WorkerLost(f"the worker could not start: {error}"
                             + (f"; its log ends with:\n{tail}" if tail else " (its log is empty)")) from None
        self._cpu_at_ready = self.cpu_seconds()
        self.cpu, self.waited, self._ready = 0.0, 0.0, True

    def log_tail(self) -> str:
        """The end of the worker's log (what it printed, and why it stopped, if it said), safe to show."""
        return _tail(self.log_path)

    def _death_reason(self, error: BaseException) -> str:
        code = self.returncode
        if isinstance(error, ProtocolError):
            return f"the worker's reply was refused: {error}"
        if code is not None and code < 0:
            return f"the process was killed by signal {signal.Signals(-code).name}"
        if code is not None:
            return f"the process exited with code {code} (os._exit or a crash)"
        return "the process stopped answering"

    def _alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return _uid_of(Path(f"/proc/{self.pid}")) is not None  # None: gone, or a zombie

    def close(self) -> None:
        """Kill the worker and every process it started, wait until they are gone, remove its group."""
        if self._ready and self._alive():
            self.cpu = self.cpu_seconds()  # its last reading: the sandbox's clock keeps it
        if self.group:
            self.group.kill()
        if self.process is not None:
            _kill_launched(self.process, self.mode)
            self.returncode = self.process.returncode
        if self.uid is not None:
            _kill_uid(self.uid)  # what a worker in "setuid" mode started, in no group and no namespace
        if self.template is not None and self.inner_pid is not None:  # it kills the rest, reaps the worker
            self.returncode = self.template.end(self.inner_pid)
        if self.group:
            self.group.remove()
        self.channel.close()

    def _signal(self, number: int) -> None:
        try:
            os.kill(self.pid, number)  # forked: the worker itself; "plain": the interpreter it is
        except ProcessLookupError:
            pass


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
        self.template: Template | None = None
        self.blocked: frozenset[str] = frozenset()
        self.not_set = [safe_text(text, 200) for text in
                        refused_limits(self.limits, per_uid=self.mode in ("root", "setuid"))]
        """The limits this platform refuses a worker (found by the judge: jail.refused_limits)."""
        self.refused: tuple[tuple[str, str], ...] = ()
        self._cpu_before = self._waited_before = 0.0  # the clocks of the workers closed so far

    def start(self) -> None:
        """Start a worker now (or, where workers are forked, their template), so that its imports overlap
        the judge's own work."""
        if self.mode in FORKED_MODES:
            if self.template is None or self.template.lost:
                self.template = Template(self.area, self.mode, self.limits, forks_template())
        elif self.worker is None:
            self.worker = Worker(self.area, self.blocked, self.mode, self.limits, self.refused)

    def block(self, module: str) -> None:
        """Never import this submission module again: importing it fails at once, in a new worker
        (it may have hung or flooded; the worker that tried it may hold half of it)."""
        self.blocked |= {module}
        self._close_worker()

    def refuse(self, function: str, message: str) -> None:
        """From the next worker on, `function` ("module.Qual.name" of the submission, e.g. one that
        hung) raises BLOCKED with `message` wherever it is called from, instead of running."""
        self.refused += ((function, message),)
        self._close_worker()

    def ready(self) -> None:
        """Start a worker if none is running and wait until it can take calls."""
        self.start()
        if self.worker is None:  # forked now (a fork that fails is closed already)
            self.worker = Worker(self.area, self.blocked, self.mode, self.limits, self.refused, self.template)
        try:
            self.worker.wait_ready()
        except WorkerLost:  # the worker is closed already
            self._retire()
            raise

    def cpu_seconds(self) -> float:
        """The CPU seconds its workers have used since each was ready: the clock time limits count."""
        if self.worker is not None and self.worker._ready:
            self.worker.cpu = self.worker.cpu_seconds()
        return self._cpu_before + (self.worker.cpu if self.worker else 0.0)

    @property
    def waited(self) -> float:
        """The seconds spent waiting for its workers' replies while they were not waiting for a CPU
        themselves: the clock of the wall-clock backstop."""
        return self._waited_before + (self.worker.waited if self.worker else 0.0)

    def allowance(self, seconds: float, wall_scale: float = 1.0) -> Allowance:
        """From now on, `seconds` of CPU, and `seconds` * BUDGETS.wall_factor * wall_scale of waiting."""
        wall = seconds * BUDGETS.wall_factor * wall_scale
        return Allowance(self.cpu_seconds() + seconds, self.waited + wall, seconds)

    def spent(self, allowance: Allowance) -> str:
        """How `allowance` ran out by the last reading of the clocks (CPU, ASLEEP or STALLED), "" if it
        has not."""
        if self._cpu_before + (self.worker.cpu if self.worker else 0.0) >= allowance.cpu:
            return CPU
        if self.waited >= allowance.waited:
            return ASLEEP if SEES_STARVATION else STALLED
        return ""

    def request(self, message: dict, limit: "float | Allowance") -> Any:
        """Send one request to the worker (started if needed); it may run `limit` CPU seconds, or
        until the Allowance is spent."""
        if not isinstance(limit, Allowance):
            limit = self.allowance(limit)
        self.ready()
        try:
            return self.worker.request(message, limit.cpu - self._cpu_before,
                                       limit.waited - self._waited_before)
        except WorkerLost:  # the worker is closed already
            self._retire()
            raise

    def isolation(self) -> dict:
        """How this sandbox isolated the student's code, for every report: its mode and what it
        isolates (describe), one line a student can read, and the limits this platform refused."""
        return {**self.report, "summary": isolation_summary(self.mode, self.not_set),
                "not_set": list(self.not_set)}

    def fresh_worker(self) -> None:
        """Close the worker: the next call gets a new one (started now, where that takes long)."""
        self._close_worker()
        self.start()

    def close(self) -> None:
        """Close the worker and its template."""
        self._close_worker()
        if self.template is not None:
            self.template.close()
            self.template = None

    def _close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self._retire()

    def _retire(self) -> None:
        """Forget the closed worker, keeping its clocks' last readings."""
        self._cpu_before += self.worker.cpu
        self._waited_before += self.worker.waited
        self.worker = None
