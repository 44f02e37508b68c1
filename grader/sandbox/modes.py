"""Which sandbox mode a machine runs workers in, why another cannot run here, and what each isolates.

docs/grading.md, "Threat model", says what holds in each mode. ISOLATION is the one table of what each
mode keeps from the student's code: what reports say (for instructors) and the line a student reads.
"""
import errno
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..secret import package_folder, secret_files, secret_roots
from ..spec import UNSAFE_FLAG
from .errors import SandboxUnavailable
from .uids import mapped_pool, pool_uids, worker_gid
from .worker import landlock, seccomp

MODE_VARIABLE = "GRADER_SANDBOX"
"""Overrides mode(): "root", "setuid", "userns" or "plain" (tests, or a machine whose probe misleads)."""



@dataclass(frozen=True)
class Isolation:
    """What a mode keeps from the student's code: `report` in every report's words, `student` in one
    line for the student (`grader check`)."""

    report: str
    student: str


ISOLATION = {
    "root": Isolation("own uid; a new root without the grader, the reference or your files; no network; "
                      "own PID namespace",
                      "your code runs in a separate process, as a user of its own, with no network and no "
                      "view of other files"),
    "userns": Isolation("a new root without the grader, the reference or your files; no capabilities; no "
                        "network; own PID namespace",
                        "your code runs in a separate process, in namespaces of its own (no network)"),
    "setuid": Isolation("own uid; no network (seccomp); sees only the files it needs and no other process "
                        "(Landlock); the reference, hidden tests and salt are checked private to root",
                        "your code runs in a separate process, as a user of its own, with no network and no "
                        "view of other files or processes"),
    "plain": Isolation("resource limits only: the code runs as you, with your files and the network",
                       "your code runs in a separate process"),
}
"""Each mode, strongest first."""
SETUID_WITHOUT_LANDLOCK = Isolation(
    "own uid; no network (seccomp); sees the machine's files (the reference, hidden tests and salt are "
    "checked private to root) and its process list, and may leave files where every user may write "
    "(Landlock unavailable here)",
    "your code runs in a separate process, as a user of its own, with no network but a view of the "
    "machine's files and processes")
"""What "setuid" mode isolates without Landlock (before Linux 5.13, not enabled, or refused by seccomp)."""
FORKED_MODES = ("root", "userns", "setuid")
"""The modes whose workers are forked from a template (worker/template.py), which imports torch once per
sandbox; in "plain" mode (macOS, Windows, no namespaces), each worker is an interpreter of its own."""
_NAMESPACES = ["--net", "--ipc", "--pid", "--fork", "--kill-child"]
"""No network; SysV IPC and message queues of its own (gone with it); every process dies with the first."""


def isolation(confinement_mode: str) -> Isolation:
    """What this mode isolates here ("setuid" depends on whether the kernel has Landlock)."""
    if confinement_mode == "setuid" and not landlock.abi():
        return SETUID_WITHOUT_LANDLOCK
    return ISOLATION[confinement_mode]


def describe(confinement_mode: str, unsafe_no_sandbox: bool = False) -> dict:
    """What a report says of the sandbox: the mode and what it isolates."""
    unsafe = confinement_mode == "plain" and unsafe_no_sandbox
    isolates = isolation(confinement_mode).report + (f" ({UNSAFE_FLAG})" if unsafe else "")
    return {"mode": confinement_mode, "isolates": isolates}


def isolation_summary(confinement_mode: str, not_set: list[str], *, memory: str) -> str:
    """One line for the student: how their code is isolated, under which limits (`memory`: the memory
    limit's figure), and which this platform refused."""
    held = not any(note.startswith("memory") for note in not_set)
    limits = f"time and memory ({memory}) limits" if held else "time limits"
    text = f"{isolation(confinement_mode).student} ({_named(confinement_mode)}), with {limits}"
    return text + (f" (not available here: {'; '.join(not_set)})" if not_set else "")


def _named(confinement_mode: str) -> str:
    """The mode by name, and where a check fell back from the one mode() chose, why that one did not start."""
    chosen = mode()
    problem = _problem(chosen) if chosen != confinement_mode else ""
    return f"{confinement_mode!r} mode" + (f": {chosen!r} does not start here ({problem})" if problem else "")


@functools.cache
def mode() -> str:
    """How workers are confined here: "root" (namespaces, a new root, an unprivileged uid),
    "setuid" (root where namespaces are refused, e.g. a container without CAP_SYS_ADMIN: an
    unprivileged uid and seccomp), "userns" (not root, or root of a user namespace that maps no
    other uid: namespaces and the same new root) or "plain" (limits only). GRADER_SANDBOX overrides
    the choice; a value that is not a mode is an error (SandboxUnavailable), never a weaker mode."""
    asked = os.environ.get(MODE_VARIABLE, "")
    if asked:
        if asked not in ISOLATION:
            raise SandboxUnavailable(f"{MODE_VARIABLE}={asked!r} is not a sandbox mode: choose one of "
                                     f"{', '.join(ISOLATION)} (or unset it to take the strongest that works)")
        return asked
    if sys.platform != "linux":  # namespaces, setuid workers and /proc are Linux's
        return "plain"
    if os.geteuid() == 0 and mapped_pool() is not None:
        return "setuid" if _refusal("root") else "root"
    return "plain" if _refusal("userns") else "userns"


def sandbox_mode(hidden: bool, unsafe_no_sandbox: bool = False) -> str:
    """The mode a grading runs in, once it is known to start: SandboxUnavailable says why not.

    `hidden`: the grading runs hidden tests (`grader grade`, grade-all, the autograder), which
    "plain" mode cannot keep hidden: it is refused unless `unsafe_no_sandbox` says otherwise.
    """
    chosen = mode()
    if not hidden and not os.environ.get(MODE_VARIABLE):  # public tests hide nothing: a weaker mode will do
        chosen = next(weaker for weaker in list(ISOLATION)[list(ISOLATION).index(chosen):]
                      if not _problem(weaker))
    problem = _problem(chosen)
    if problem:
        why = _chosen_because(chosen)
        raise SandboxUnavailable(f"the sandbox cannot run in {chosen!r} mode here: {problem}"
                                 + (f" ({why})" if why else ""))
    if chosen == "plain" and hidden and not unsafe_no_sandbox:
        raise SandboxUnavailable(
            f"no sandbox here ('plain' mode: {_chosen_because(chosen)}): the submission's code would run as "
            "you, able to read the reference, the hidden tests and the salt. Grade as root or where user "
            f"namespaces are allowed, or pass {UNSAFE_FLAG} (the report says so)")
    return chosen


def _chosen_because(chosen: str) -> str:
    """Why mode() chose `chosen` and not the namespaced mode it tries first, in that probe's own words
    ("" where there was none to pass over)."""
    if os.environ.get(MODE_VARIABLE):
        return f"{MODE_VARIABLE}={chosen}"
    if sys.platform != "linux":
        return "namespaces are Linux's"
    stronger = {"setuid": "root", "plain": "userns"}.get(chosen)
    refused = _refusal(stronger) if stronger else ""
    return f"{stronger!r} mode was refused: {refused}" if refused else ""


@functools.cache
def _problem(confinement_mode: str) -> str:
    """Why workers cannot start in this mode here ("" if they can)."""
    if confinement_mode in ("root", "setuid"):
        if os.geteuid() != 0:
            return "it needs the grader to run as root"
        if mapped_pool() is None:
            return "this user namespace maps no uid for the worker besides root (/proc/self/uid_map)"
    if confinement_mode == "root" and (refused := _refusal("root")):
        return f"new mount, network and PID namespaces are refused ({refused}): try 'setuid'"
    if confinement_mode == "userns" and (refused := _refusal("userns")):
        return f"user namespaces are refused ({refused})"
    if confinement_mode == "setuid":
        return _setuid_problem()
    return ""


def launcher(confinement_mode: str) -> list[str]:
    """The command a template or worker is started under in this mode (the judge's death kills unshare,
    whose death kills the namespace)."""
    if confinement_mode == "root":
        return [*_die_with_judge(), "unshare", "--mount", "--propagation", "private", *_NAMESPACES, "--"]
    if confinement_mode == "userns":
        return [*_die_with_judge(), "unshare", "--user", "--map-root-user", "--mount", "--propagation",
                "private", *_NAMESPACES, "--"]
    return []


_DIE_WITH_JUDGE = ("import ctypes, os, sys\n"
                   "if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0):\n"
                   "    sys.exit(f'prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}')\n"
                   "if os.getppid() != int(sys.argv[1]):\n"
                   "    sys.exit('the judge is gone')\n"
                   "os.execvp(sys.argv[2], sys.argv[2:])\n")
"""Sets the parent-death signal (SIGKILL), which execve keeps, then execs its command: what
`setpriv --pdeathsig KILL` does, which util-linux before 2.33 lacks (RHEL/Rocky 8 ship 2.32); it also exits
if the judge died before the signal was set."""


def _die_with_judge() -> list[str]:
    """A command prefix: what follows dies with this process (the judge)."""
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_JUDGE, str(os.getpid())]


@functools.cache
def _refusal(confinement_mode: str) -> str:
    """Why this mode's launcher does not start here, in its own words ("" if it does). The probe mounts a
    /proc too, as the template does (Colab refuses that, not the namespaces)."""
    *command, end = launcher(confinement_mode)
    try:
        done = subprocess.run([*command, "--mount-proc", end, "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    if done.returncode == 0:
        return ""
    return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]


_PROBE = ("import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'rb').close()\n"
          "        print(path)\n    except OSError:\n        pass\n")


@functools.cache
def _setuid_problem() -> str:
    """What a worker's uid could read that it must not, or could not read that it needs (a
    process started as that uid tries them)."""
    if not seccomp.supported():
        return f"no seccomp filter for this machine ({os.uname().machine}) to take the network away"
    secrets, needed = secret_files(), _needed_files()
    uid = pool_uids()[0]
    try:
        done = subprocess.run([sys.executable, "-S", "-c", _PROBE, *needed, *map(str, secrets)],
                              user=uid, group=worker_gid(), extra_groups=[], cwd="/", capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    except PermissionError as error:
        if error.errno != errno.EACCES:  # EPERM: root without CAP_SETUID (Colab's, a restricted container's)
            return f"the worker's uid ({uid}) cannot be taken here: {error.strerror}"
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
                                       if (folder := package_folder(name)) is not None]


def _secret_root(path: Path) -> Path:
    return next(root for root in secret_roots() if path.is_relative_to(root))
