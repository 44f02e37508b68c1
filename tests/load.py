"""Load for the tests that prove a grade does not depend on it (`from load import ...`): busy processes
each in a session of its own, as other users' jobs are (the kernel's autogroup gives each session its
share, so they are not folded into one), and a CPU quota like Gradescope's half a vCPU."""
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUSY = "while True: pass"
CGROUPS = Path("/sys/fs/cgroup")
QUOTA_US, PERIOD_US = 50_000, 100_000  # half a CPU


def cores() -> int:
    return len(os.sched_getaffinity(0))


@contextmanager
def busy_processes(count: int, cpu: int | None = None) -> Iterator[list[int]]:
    """`count` busy loops (on CPU `cpu` only, if given), each in its own session; killed by pid."""
    prefix = ["taskset", "-c", str(cpu)] if cpu is not None else []
    processes = []
    try:
        for _ in range(count):
            processes.append(subprocess.Popen([*prefix, sys.executable, "-c", BUSY], start_new_session=True,
                                              stdin=subprocess.DEVNULL))
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _quota_group() -> tuple[Path, dict[str, str]] | None:
    """A new cgroup's folder and the files that give it half a CPU (cgroup v2, else v1's cpu
    controller); None where neither can be written (not root, a container)."""
    name = f"grader-test-{os.getpid()}"
    if (CGROUPS / "cgroup.controllers").is_file() and os.access(CGROUPS, os.W_OK):
        return CGROUPS / name, {"cpu.max": f"{QUOTA_US} {PERIOD_US}"}
    if (CGROUPS / "cpu" / "cpu.cfs_quota_us").is_file() and os.access(CGROUPS / "cpu", os.W_OK):
        return CGROUPS / "cpu" / name, {"cpu.cfs_period_us": str(PERIOD_US),
                                        "cpu.cfs_quota_us": str(QUOTA_US)}
    return None


@contextmanager
def half_a_cpu() -> Iterator[tuple[list[str], str]]:
    """A command prefix that runs a command (and all it starts) on half a CPU, and how: a cgroup with a
    CPU quota where one can be made, else the command pinned to one CPU that a busy loop shares."""
    group = _quota_group()
    if group is None:
        with busy_processes(1, cpu=0):
            yield ["taskset", "-c", "0"], "taskset: one CPU shared with a busy loop"
        return
    folder, settings = group
    folder.mkdir()
    with tempfile.TemporaryDirectory() as scratch:
        enter = Path(scratch, "enter.sh")  # moves itself into the group, then runs the command there
        enter.write_text(f'echo $$ > {folder / "cgroup.procs"} && exec "$@"\n')
        try:
            for name, value in settings.items():
                (folder / name).write_text(value)
            yield ["sh", str(enter)], f"cgroup {folder}: {QUOTA_US} us of CPU every {PERIOD_US} us"
        finally:  # what ran in it has ended; the groups the sandbox made below it are empty too
            for below in sorted(folder.rglob("*"), key=lambda path: -len(path.parts)):
                if below.is_dir():
                    below.rmdir()
            folder.rmdir()
