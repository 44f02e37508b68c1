"""The processes of a worker, as the judge reads them from /proc, and how it kills them.

A worker's processes are read from /proc (its descendants, their CPU time and how long they waited for a CPU);
where there is no /proc (macOS, Windows) the clocks fall back to the wall clock (worker_client.py). One way of
killing a worker per mode, each waiting until they are gone: "root" and "userns" kill the first process of the
worker's PID namespace (the kernel kills the rest); "setuid" kills its control group and every process of its
uid; "plain" its process group and each descendant found (worker_client.Worker._kill). The judge's own
memory is capped while it grades (own_memory_limited).
"""
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

try:
    import resource
except ImportError:  # Windows
    resource = None

PROC = Path("/proc/self/stat").is_file()
_TICKS = os.sysconf("SC_CLK_TCK") if PROC else 100


def descendants(pid: int) -> list[int]:
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


def cpu_of(pid: int) -> float:
    """User and system CPU seconds of one process, with those of its children it has waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(ticks) for ticks in fields[11:15]) / _TICKS  # utime, stime, cutime, cstime


def scheduled(pids: list[int]) -> tuple[float, float]:
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


def uid_of(process: Path) -> int | None:
    """The uid of a process that can still run; None for a zombie (it has exited: a killed worker's
    first process waits there until the machine's init reaps it, which may take a second)."""
    try:
        status = dict(line.split(":", 1) for line in (process / "status").read_text().splitlines()
                      if ":" in line)
        return None if status["State"].split()[0] in "ZX" else int(status["Uid"].split()[0])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def inner_pid(pid: int) -> int | None:
    """A process's pid in its own (innermost) PID namespace."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in status.splitlines() if line.startswith("NSpid:")), f"NSpid: {pid}")
    return int(line.split()[-1])


def first_child(pid: int) -> int:
    """The first process of a PID namespace unshare made (its child), else `pid` itself."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0]) if children else pid
    except OSError:
        return pid


def kill_uid(uid: int) -> None:
    """Kill every process of `uid` (the worker's own: nothing else runs as it) until none is left
    (zombies aside: they run nothing)."""
    for _ in range(100):
        found = False
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and uid_of(entry) == uid:
                found = True
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not found:
            return
        time.sleep(0.01)


def kill_tree(pid: int) -> None:
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


def kill_launched(process: subprocess.Popen, confinement_mode: str) -> None:
    """Kill a process _launch started and every process it started, and wait for it."""
    if process.poll() is None:
        if confinement_mode in ("root", "userns"):
            # The namespace's first process: when it dies the kernel kills the rest, and unshare
            # exits once they are all gone.
            with contextlib.suppress(ProcessLookupError):
                os.kill(first_child(process.pid), signal.SIGKILL)
        else:
            kill_tree(process.pid)
    process.wait()


JUDGE_MEMORY_BYTES = 4 << 30
"""The judge's own address space (0.9 GiB at its peak grading the correct example with every test)."""


@contextmanager
def own_memory_limited(limit: int = JUDGE_MEMORY_BYTES) -> Iterator[None]:
    """Cap this process's address space while the block runs, where the platform allows it, so that
    a reply that got past the protocol's bounds costs this grading, not the machine. Only the soft
    limit: the workers it starts inherit it and raise it to their own. The old limit comes back at
    the end: a process that grades in-process (a notebook's kernel, a test run) goes on, and starts
    programs (a browser's allocator reserves tens of GiB of address space), with its own."""
    before = resource.getrlimit(resource.RLIMIT_AS) if resource is not None else None
    if before is not None:
        hard = before[1]
        soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        except (ValueError, OSError):  # macOS refuses RLIMIT_AS
            before = None
    try:
        yield
    finally:
        if before is not None:
            resource.setrlimit(resource.RLIMIT_AS, before)


