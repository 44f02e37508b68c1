"""The resource limits of a worker and everything it starts, set in the worker itself (jail.confine), in
every mode, each where the platform has it (not in the judge's preexec_fn, which CPython documents as
unsafe in a process with threads): macOS refuses RLIMIT_AS, Windows has no `resource` module. What a
platform refuses, the judge finds on its own (refused_limits) and every report says.
"""
import json
import os
import signal
import sys
from dataclasses import dataclass

try:
    import resource
except ImportError:  # Windows
    resource = None


@dataclass
class Limits:
    """Resource limits of the worker and everything it starts (soft = hard: it cannot raise them)."""

    memory_bytes: int = 8 << 30  # address space: torch's import maps ~2 GiB; a 100 GB tensor fails here
    group_memory_bytes: int = 2 << 30
    """A worker's memory: all its processes together, swap included (cgroup.py, as root), and each of
    them alone (RLIMIT_DATA, on Linux: in every mode, so that `grader check` has the limit a grading has)."""
    processes: int = 64  # threads count: torch and Python need a few; a fork bomb stops at 64 (its group too)
    scratch_bytes: int = 64 << 20  # the home, a tmpfs ("root", "userns"; else file_bytes a file)
    cpus: float = 1.0  # all its processes together, at most one core (cgroup.py): it computes on one thread
    file_bytes: int = 8 << 20  # also caps the log (stdout/stderr): a print flood fails its own write
    open_files: int = 256
    cpu_seconds: int = 0  # set by the judge from its budgets (spec.Budgets.worker_cpu_seconds); 0: none

    @property
    def memory(self) -> str:
        """The memory limit as a student reads it (reports, messages; docs/lab.md states it too)."""
        return f"{self.group_memory_bytes / 2**30:g} GiB"

    def apply(self, per_uid: bool) -> list[str]:
        """Set each that the platform allows; the process limit only where the worker has a uid of its
        own (`per_uid`): it counts every process of the uid, a whole desktop session's for a student's
        own. Returns the limits not set, each as "what (why)"."""
        limits = {"memory": ("RLIMIT_DATA", self.group_memory_bytes),
                  "address space": ("RLIMIT_AS", self.memory_bytes),
                  "output": ("RLIMIT_FSIZE", self.file_bytes),
                  "open files": ("RLIMIT_NOFILE", self.open_files), "core dumps": ("RLIMIT_CORE", 0)}
        if self.cpu_seconds:
            limits["CPU time"] = ("RLIMIT_CPU", self.cpu_seconds)
        if per_uid:
            limits["processes"] = ("RLIMIT_NPROC", self.processes)
        if resource is None:
            return [f"{what} (no resource module)" for what in limits]
        not_set = []
        if sys.platform != "linux":  # macOS accepts it, but memory from mmap (a tensor's) escapes it
            not_set.append("memory (RLIMIT_DATA holds only on Linux)")
            del limits["memory"]
        for what, (name, value) in limits.items():
            try:
                resource.setrlimit(getattr(resource, name), (value, value))
            except (AttributeError, ValueError, OSError) as error:  # e.g. macOS: ValueError for RLIMIT_AS
                not_set.append(f"{what} ({name}: {error or type(error).__name__})")
        if hasattr(signal, "SIGXFSZ"):  # a write past file_bytes fails (EFBIG), not the worker
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        return not_set


def refused_limits(limits: Limits, *, per_uid: bool) -> list[str]:
    """The limits this platform refuses a worker (what limits.apply returns), found by the judge on its
    own, in a child that sets them and then exits (where there is fork; without it, Windows, there is no
    resource module and every limit is refused): a report says what it says of the sandbox on the judge's
    word, never on a worker's."""
    if resource is None:
        return limits.apply(per_uid=per_uid)  # sets nothing: says why each is refused
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the judge's runs here but apply (os._exit: no exit handlers)
        try:
            os.close(reading)
            os.write(writing, json.dumps(limits.apply(per_uid=per_uid)).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with open(reading, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)
