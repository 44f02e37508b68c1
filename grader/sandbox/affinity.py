"""One CPU for a grading: its judge, its sandbox's template and the workers forked from it.

The judge and its worker take turns: one waits for the other's reply, thousands of times a grade. Left
free, the scheduler wakes the one replied to on an idle CPU, so every round trip crosses CPUs and wakes
an idle one; on one CPU each hand-over is a switch on that CPU. Measured on the 2-core (virtual)
development machine, CPU of the command and its workers: `grader grade solutions` 11.3 to 11.9 s free,
8.1 to 8.3 s on one CPU; `grader check solutions` 5.6 to 6.0 s against 4.6 s (docs/performance.md).

Gradings side by side (grade-all's `--jobs`, the tests' processes) each claim a CPU of their own: a lock
file per CPU in a folder of this user's, held while the grading runs (released by the kernel if the
process dies). Where every allowed CPU is claimed, or where a process cannot pin itself (macOS,
Windows), the grading runs unpinned, as before. Time limits count CPU time and leave out the time a
worker waited for a CPU (docs/grading.md, "Time limits"): no verdict depends on where it runs.
"""
import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


def _current_cpu() -> int | None:
    """The CPU this thread runs on (Linux's /proc), None where it cannot tell."""
    try:
        line = Path("/proc/thread-self/stat").read_text()
        return int(line.rpartition(")")[2].split()[36])  # field 39, "processor"
    except (OSError, ValueError, IndexError):
        return None


def _claimed(cpu: int, folder: Path) -> int | None:
    """A file descriptor holding CPU `cpu`'s lock, None if another grading holds it (or it cannot be
    opened)."""
    try:
        descriptor = os.open(folder / f"cpu-{cpu}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def _lock_folder() -> Path | None:
    """This user's folder of CPU locks, made if missing; None if it cannot be made or is not theirs."""
    folder = Path(tempfile.gettempdir()) / f"grader-cpus-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = folder.lstat()  # a link, or a folder another user made first: not used
    except OSError:
        return None
    return folder if stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() else None


def _claim() -> tuple[int, int] | None:
    """(CPU, its lock's descriptor): the first allowed CPU from the one this thread runs on that no
    other grading holds; None where there is none, or where this process cannot pin itself."""
    if fcntl is None or not (hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    current = _current_cpu()
    folder = _lock_folder() if len(allowed) > 1 and current in allowed else None
    if folder is None:
        return None
    start = allowed.index(current)
    for cpu in allowed[start:] + allowed[:start]:
        descriptor = _claimed(cpu, folder)
        if descriptor is not None:
            return cpu, descriptor
    return None


@contextlib.contextmanager
def one_cpu() -> Iterator[int | None]:
    """Pin this thread (and what it forks or starts from now on) to one allowed CPU that no other
    grading of this user's holds, starting with the one it runs on; its former CPUs come back after.
    Yields the CPU, or None where it stays unpinned."""
    claimed = _claim()
    if claimed is None:
        yield None
        return
    cpu, descriptor = claimed
    allowed = os.sched_getaffinity(0)
    try:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:  # a seccomp filter, a cpuset changed meanwhile: unpinned
            yield None
            return
        try:
            yield cpu
        finally:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, allowed)
    finally:
        os.close(descriptor)
