"""One control group per worker: its processes together get one worker's memory (swap included),
process count and CPU, and killing the group ends every one of them, new sessions and double forks too.

cgroup v2 where the unified hierarchy offers the controllers, v1 hierarchies for those it does not (a
hybrid host mounts both: v1's controllers, v2's cgroup.kill). A worker's group is
`grader/judge-<judge pid>/worker-<n>` below the judge's own cgroup in each hierarchy, so that the limits
the judge runs under (a container's) still apply to it, and whoever started the judge can kill all of a
grading's groups at once (`kill_judge`, grade-all's backstop). Groups left by a judge that died are
killed and removed by the next judge to start one.

Only root can make groups, and not in every container: there `Group.create` returns None, and the
per-process limits of jail.Limits (and the PID namespace where there is one) are what remains
(docs/grading.md, "Threat model").
"""
import atexit
import functools
import itertools
import os
import shlex
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

GROUPS = "grader"
_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
_PERIOD_US = 100_000
_workers = itertools.count()
_lock = threading.Lock()  # grade-all's threads may look for the hierarchies at once


@dataclass(frozen=True)
class _Hierarchy:
    """One mounted hierarchy: where the groups of this process's judges go in it, and which of
    _CONTROLLERS it enforces there."""

    base: Path
    controllers: frozenset[str]
    unified: bool


def _mounts() -> list[tuple[Path, str, set[str]]]:
    """(mount point, type, options) of each mounted cgroup hierarchy."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind, options, *_ = line.split()
        if kind in ("cgroup", "cgroup2"):
            found.append((Path(point.replace("\\040", " ")), kind, set(options.split(","))))
    return found


def _own_paths() -> tuple[dict[str, str], str | None]:
    """This process's cgroup: per v1 controller, and in the unified hierarchy (None if absent)."""
    v1, unified = {}, None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            unified = path
        for controller in controllers.split(","):
            v1[controller] = path
    return v1, unified


def _enable(folder: Path, controllers: set[str]) -> bool:
    """Let `folder`'s children have `controllers` (v2); False if the kernel refuses (a folder that
    holds processes itself, other than the root, cannot)."""
    try:
        (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(controllers)))
        return True
    except OSError:
        return False


def _found() -> list[_Hierarchy]:
    """Each mounted hierarchy with controllers to use in it; v2's first (a hybrid host's unified one
    offers none: there it only kills)."""
    mounts, (v1_paths, unified_path) = _mounts(), _own_paths()
    found, taken = [], set()
    for point, kind, _ in mounts:
        if kind != "cgroup2" or unified_path is None:
            continue
        offered = set((point / "cgroup.controllers").read_text().split()) & set(_CONTROLLERS)
        own = point / unified_path.lstrip("/")
        # Below the judge's own group when the kernel lets that group delegate the controllers; the
        # hierarchy's root otherwise (a host's, or a container's own namespace); no limits at worst.
        for parent in (own, point):
            if offered and _enable(parent, offered):
                found.append(_Hierarchy(parent / GROUPS, frozenset(offered), True))
                break
        else:
            found.append(_Hierarchy(own / GROUPS, frozenset(), True))
        taken |= offered
    for point, kind, options in mounts:
        controllers = (options & set(_CONTROLLERS)) - taken
        if kind == "cgroup" and controllers:
            path = v1_paths.get(sorted(controllers)[0], "/")
            found.append(_Hierarchy(point / path.lstrip("/") / GROUPS, frozenset(controllers), False))
            taken |= controllers
    return found


def _hierarchies() -> tuple[_Hierarchy, ...]:
    """Where groups can be made here; empty where none can (not root, cgroups not mounted or read-only)."""
    with _lock:
        return _setup()


@functools.cache
def _setup() -> tuple[_Hierarchy, ...]:
    if os.geteuid() != 0:
        return ()
    try:
        found = _found()
    except OSError:
        return ()
    usable = []
    for hierarchy in found:
        try:
            hierarchy.base.mkdir(exist_ok=True)
            if hierarchy.unified:
                _enable(hierarchy.base, set(hierarchy.controllers))
            usable.append(hierarchy)
        except OSError:
            pass  # read-only cgroupfs (a container's), or one we may not write to
    if usable:
        _sweep(usable)
        atexit.register(_remove_own)
    return tuple(usable)


def available() -> frozenset[str]:
    """The controllers a worker's group enforces here (none: no groups, or groups that only kill)."""
    return frozenset().union(*(h.controllers for h in _hierarchies()))


def _judge_folders(pid: int) -> list[tuple[_Hierarchy, Path]]:
    return [(h, h.base / f"judge-{pid}") for h in _hierarchies()]


class Group:
    """A worker's control group: a folder in each hierarchy."""

    def __init__(self, folders: list[tuple[_Hierarchy, Path]]):
        self.folders = folders

    @classmethod
    def create(cls, memory_bytes: int, processes: int, cpus: float) -> "Group | None":
        """A new group with these limits, in this judge's folder; None where groups cannot be made."""
        name = f"worker-{next(_workers)}"
        folders = []
        try:
            for hierarchy, judge in _judge_folders(os.getpid()):
                judge.mkdir(exist_ok=True)
                if hierarchy.unified:
                    _enable(judge, set(hierarchy.controllers))
                (judge / name).mkdir()
                folders.append((hierarchy, judge / name))
        except OSError:
            Group(folders).remove()
            return None
        if not folders:
            return None
        group = cls(folders)
        try:
            group._limit(memory_bytes, processes, cpus)
        except OSError:  # a limit this kernel refuses: no group rather than one that does not hold
            group.remove()
            return None
        return group

    def _limit(self, memory_bytes: int, processes: int, cpus: float) -> None:
        quota = int(cpus * _PERIOD_US)
        settings = {  # v2 and v1 names; the files a hierarchy lacks are skipped
            "memory.max": memory_bytes, "memory.swap.max": 0,  # no swap: memory.max is all it gets
            "memory.limit_in_bytes": memory_bytes, "memory.memsw.limit_in_bytes": memory_bytes,
            "pids.max": processes,
            "cpu.weight": 100, "cpu.max": f"{quota} {_PERIOD_US}",  # one worker's share, at most `cpus` cores
            "cpu.shares": 1024, "cpu.cfs_period_us": _PERIOD_US, "cpu.cfs_quota_us": quota,
        }
        for _, folder in self.folders:
            for name, value in settings.items():  # in this order: memsw may not go below memory's limit
                if (folder / name).exists():
                    (folder / name).write_text(str(value))

    def join_command(self) -> list[str]:
        """A prefix for a command line that runs the command in this group (a shell joins it, then
        execs the command: everything the command starts is in the group from its first instruction)."""
        files = " ".join(shlex.quote(str(folder / "cgroup.procs")) for _, folder in self.folders)
        script = f'for f in {files}; do echo $$ > "$f" || exit 125; done; unset PWD; exec "$@"'
        return ["/bin/sh", "-c", script, "sh"]

    def add(self, pid: int) -> None:
        """Move a process into the group (a worker forked by its template: before it runs any code of the
        submission)."""
        for _, folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid))

    def kill(self) -> None:
        """SIGKILL every process in the group, and wait until none is left."""
        _kill_tree([folder for _, folder in self.folders])

    def remove(self) -> None:
        """Kill what is left, then remove the group's folders."""
        self.kill()
        _remove_tree([folder for _, folder in self.folders])

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process of the group so far (None if no hierarchy counts it)."""
        for _, folder in self.folders:
            try:
                if (folder / "cpuacct.usage").exists():
                    return int((folder / "cpuacct.usage").read_text()) / 1e9
                if (folder / "cpu.stat").exists():
                    stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
                    if "usage_usec" in stat:
                        return int(stat["usage_usec"]) / 1e6
            except (OSError, ValueError):
                pass
        return None

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for its memory limit (v2's memory.events, v1's
        memory.oom_control: their oom_kill count)."""
        for _, folder in self.folders:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    counts = dict(line.split() for line in (folder / name).read_text().splitlines())
                    if int(counts.get("oom_kill", 0)) > 0:
                        return True
                except (OSError, ValueError):
                    pass
        return False

    def memory_peak(self) -> int | None:
        """The most memory the group held at once, in bytes (None if not counted here)."""
        for _, folder in self.folders:
            for name in ("memory.peak", "memory.memsw.max_usage_in_bytes", "memory.max_usage_in_bytes"):
                try:
                    return int((folder / name).read_text())
                except (OSError, ValueError):
                    pass
        return None


def _subgroups(folder: Path) -> list[Path]:
    """`folder` and the groups below it, deepest first; none if it is gone (os.walk skips what another
    process removes meanwhile: a judge and grade-all's backstop may remove the same groups)."""
    return [Path(root) for root, _, _ in os.walk(folder, topdown=False)]


def _processes(folders: list[Path]) -> set[int]:
    found = set()
    for group in (group for folder in folders for group in _subgroups(folder)):
        try:
            found |= {int(pid) for pid in (group / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            pass
    return found


def _kill_tree(folders: list[Path]) -> None:
    """Kill every process in `folders` and their subgroups: at once with cgroup.kill (v2, Linux 5.14),
    else one by one until none is left (pids.max bounds how many a fork loop can add meanwhile)."""
    for folder in folders:
        try:
            (folder / "cgroup.kill").write_text("1")
        except OSError:
            pass
    for _ in range(500):
        pids = _processes(folders)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def _remove_tree(folders: list[Path]) -> None:
    """rmdir the folders, deepest first; a group whose last process is not yet reaped is retried."""
    for group in (group for folder in folders for group in _subgroups(folder)):
        _rmdir(group)


def _rmdir(folder: Path) -> None:
    for _ in range(200):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def kill_judge(pid: int) -> None:
    """Kill every process in the groups of the judge process `pid` and remove them (grade-all's backstop,
    once that judge is killed)."""
    folders = [folder for _, folder in _judge_folders(pid)]
    _kill_tree(folders)
    _remove_tree(folders)


def kill_gone_judges() -> None:
    """Kill every process in the groups of judges that are gone, and remove them: grade-all's backstop
    for a grading process killed with the judge process that forked it."""
    _sweep(list(_hierarchies()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _sweep(hierarchies: list[_Hierarchy]) -> None:
    """Kill and remove the groups of judges that are gone (killed before they could)."""
    for hierarchy in hierarchies:
        for folder in list(hierarchy.base.glob("judge-*")):
            pid = folder.name.removeprefix("judge-")
            if pid.isdigit() and not _alive(int(pid)):
                _kill_tree([folder])
                _remove_tree([folder])


def _remove_own() -> None:
    """At exit: this judge's folder, and any worker's group not closed (an exit on an unexpected error)."""
    kill_judge(os.getpid())
