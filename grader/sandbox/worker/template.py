"""The template of a sandbox's workers ("root", "userns" and "setuid" modes): a process that imports
torch once and forks each worker the judge asks for, so that a worker starts in milliseconds rather
than in the CPU-second that importing torch takes.

Started as `python -m <package>.template CONFINEMENT_JSON` (see ../template_client.py) with a control
socket of the judge's as its stdin (or forked from a judge that has imported torch and holds nothing a
worker may not see: `fork`, for a grading that has read neither the salt nor a hidden test yet,
template_client.forks_template), it builds the new root that every worker of the sandbox shares ("root"
and "userns": it is then the first process of their PID namespace), imports torch, numpy and the
worker's code, and says it is ready. It never imports the submission nor runs any of its code: each
worker is a fork that confines itself (jail.confine: its own uid, limits, seccomp, Landlock, its own
SysV IPC) before the judge lets it import the submission.
The control socket carries JSON and file descriptors only:

- {"op": "spawn", "uid", "gid", "home", "blocked"} with the worker's request pipe, reply pipe and log:
  fork a worker; the reply is {"pid": its pid in the template's PID namespace};
- {"op": "end", "pid"}: the worker is done with (the judge killed it, or it exited): as the first
  process of its namespace, kill every other process of it (what the worker started too), reap them,
  and reply {"status": the worker's wait status}.

Its end of the socket hung up (the judge is gone), the template exits, and the kernel kills what is
left of its namespace with it.
"""
import ctypes
import fcntl
import gc
import io
import json
import os
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from .jail import (
    SANDBOX,
    Confinement,
    build_root,
    confine,
    enter_namespaces,
    enter_root,
    fresh_home,
    stay_with_parent,
)
from .messages import GO
from .protocol import receive

_MAX_CONTROL_BYTES = 1 << 16
_BYTES_DATA = sys.getsizeof(b"") - 1
"""Where a bytes object's data begins, past its header (CPython)."""


def _fork_worker(c: Confinement, request: dict, fds: list[int], control: socket.socket) -> int:
    """Fork a worker that serves the judge on `fds` (requests, replies, log); its pid."""
    worker = replace(c, uid=request["uid"], gid=request["gid"], home=request["home"])
    if c.mode in ("root", "userns"):
        fresh_home(worker)
    pid = os.fork()
    if pid:
        return pid
    _exit_after(lambda: _serve(c, worker, request, fds, control))  # never back into the template's loop


def _serve(c: Confinement, worker: Confinement, request: dict, fds: list[int], control: socket.socket) -> int:
    """A forked worker: confine it, then serve the judge once it says GO; the exit status."""
    control.close()  # a worker must not ask for workers
    requests_fd, replies_fd, log_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds)  # out of the way
    for target, fd in ((3, requests_fd), (4, replies_fd), (1, log_fd), (2, log_fd)):
        os.dup2(fd, target)
    os.closerange(5, os.sysconf("SC_OPEN_MAX"))
    os.setsid()  # a process group of its own, as a worker started on its own has
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if c.mode == "setuid":  # a home of its own, made by the judge
        os.chdir(worker.home)
        os.environ["HOME"] = os.environ["TMPDIR"] = worker.home
    requests, replies = io.FileIO(3, "rb"), io.FileIO(4, "wb")
    if c.mode in ("root", "userns"):  # SysV IPC of its own: nothing left there for the next worker
        enter_namespaces(c.mode, ipc_only=True)
    confine(worker, requests.fileno())
    if receive(requests) != GO:
        return 1
    from .serve import main as serve

    serve(requests, replies, [f"{SANDBOX}/submission" if c.mode != "setuid" else c.submission,
                              ",".join(request.get("blocked", []))], c.limits)
    return 0


def _exit_after(body: Callable[[], int]) -> NoReturn:
    """The end of a forked child, which must never return into its parent's code: exit with the status
    `body` returns, or 1 once what went wrong is in its log."""
    status = 1
    try:
        status = body()
    except BaseException:  # noqa: BLE001 - said in its log, then gone
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(status)


def _end(pid: int) -> int | None:
    """Kill what is left of a worker and return its wait status (None if it was reaped already)."""
    if os.getpid() == 1:  # the first process of the namespace: every other one is the worker's
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        status: int | None = os.waitpid(pid, 0)[1]
    except ChildProcessError:
        status = None
    while True:  # reap the rest (orphans of the worker come to the namespace's first process)
        try:
            if os.waitpid(-1, os.WNOHANG if os.getpid() != 1 else 0)[0] == 0:
                break
        except ChildProcessError:
            break
    return status


def fork(c: Confinement, control: int, log: int, environment: dict[str, str], cwd: str, group: Any) -> int:
    """Fork a template from this process (the judge), which has imported torch, so that the template need
    not: what `_launch` and the command it runs (a control group, the parent-death signal, unshare) would
    do, done in the fork, which then runs `main`. Returns the fork's pid: in "root" and "userns" it is the
    process that waits for the new PID namespace's first process, the template, as unshare does.

    The fork has this process's memory: the caller makes sure nothing in it is hidden from workers
    (template_client.forks_template); the environment goes, in os.environ and in the block the process started
    with, replaced by `environment` (_forget_environment)."""
    from . import serve  # noqa: F401 - loaded here: the grader's files are out of the template's sight
    path = _launched_path(environment)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the fork would write what the judge had not yet
    pid = os.fork()
    if pid:
        return pid
    _exit_after(lambda: _become_template(c, control, log, environment, cwd, group, path))  # never back


def _become_template(c: Confinement, control: int, log: int, environment: dict[str, str], cwd: str,
                     group: Any, path: list[str]) -> int:
    """The fork of `fork`: confined as a launched template is, then `main`; the exit status."""
    os.setsid()
    if group is not None:
        group.add(os.getpid())
    for target, fd in ((0, control), (1, log), (2, log)):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    # a fresh interpreter's standard streams (the judge's may be another's, e.g. pytest's capture)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                       closefd=False)
    stay_with_parent(0)
    for number in signal.valid_signals():  # no handler of the judge's runs here
        if callable(signal.getsignal(number)):
            signal.signal(number, signal.SIG_DFL)
    _forget_environment(environment)
    sys.path[:] = path
    os.chdir(cwd)
    if c.mode in ("root", "userns"):
        enter_namespaces(c.mode)
        first = os.fork()
        if first:  # as unshare --fork --kill-child: end with the namespace's first process
            os.closerange(0, 3)
            return os.waitstatus_to_exitcode(os.waitpid(first, 0)[1]) & 0xFF
        stay_with_parent(0)
    main([c.to_json()])
    return 0


def _launched_path(environment: dict[str, str]) -> list[str]:
    """sys.path as a launched template's `python -P -s` has it in `environment` (its PYTHONPATH): without
    the judge's working directory or script folder (wherever the judge has gone since it started), the
    user's site-packages, or what the judge's own program added; so that a submission's absolute import
    finds in a forked worker what it finds in a launched one."""
    command = [sys.executable, "-P", "-s", "-c", "import json, sys; print(json.dumps(sys.path))"]
    shown = subprocess.run(command, env={"PYTHONPATH": environment.get("PYTHONPATH", "")},
                           capture_output=True, check=True)
    return json.loads(shown.stdout)


def _forget_environment(environment: dict[str, str]) -> None:
    """Replace the judge's environment with `environment`: os.environ, its values overwritten with zeros
    first (the salt may be one: clearing alone would leave its bytes in freed memory), and the block the
    process started with (what /proc/self/environ shows), overwritten with zeros too."""
    for value in os.environb.values():  # the very bytes objects os.environ holds
        if len(value) > 1:  # b"" and single bytes are the interpreter's shared objects
            ctypes.memset(id(value) + _BYTES_DATA, 0, len(value))
    os.environ.clear()
    after_name = Path("/proc/self/stat").read_text().rpartition(")")[2].split()  # fields 3, 4, ...
    start, end = int(after_name[47]), int(after_name[48])  # env_start and env_end: fields 50 and 51
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)
    os.environ.update(environment)


def main(argv: list[str]) -> None:
    # Python turns SIGINT into KeyboardInterrupt; as the namespace's first process the template gets only
    # the signals it handles from a worker of its uid ("userns"): the judge ends it by its socket, or kills it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # what the template prints goes to its log
    c = Confinement.from_json(argv[0])
    if c.mode in ("root", "userns"):
        build_root(c)
        enter_root(c)
    else:  # "setuid": no namespace to die with; die with the judge
        stay_with_parent(control.fileno())
    from . import serve  # noqa: F401 - torch, numpy and the worker's code, once for every worker

    # What the template holds lives as long as its workers: out of their collections' sight, which would
    # otherwise walk it (and write to, and so copy, its pages) in every worker
    gc.freeze()

    control.send(json.dumps({"ready": True}).encode())
    while True:
        data, fds, _, _ = socket.recv_fds(control, _MAX_CONTROL_BYTES, 3)
        if not data:
            return
        request = json.loads(data)
        try:
            if request["op"] == "spawn":
                reply = {"pid": _fork_worker(c, request, fds, control)}
            else:
                reply = {"status": _end(int(request["pid"]))}
        finally:
            for fd in fds:
                os.close(fd)
        control.send(json.dumps(reply).encode())


if __name__ == "__main__":
    main(sys.argv[1:])
