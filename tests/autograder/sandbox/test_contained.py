"""Containment: nothing a submission does reaches the host, the judge or another student (issue 18).

One test per attack: a worker's processes together held to one worker's memory, processes and CPU (its
control group), nothing of a grading outliving its judge, no SysV IPC shared with the host, no disk of
the host filled. What needs root, namespaces or cgroups is skipped elsewhere, saying so.
"""
import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attacks import call, contained_code
from grader.grading import GradeOptions
from grader.instructor.hostile import fresh_marker, state, survivors
from grader.sandbox import cgroup
from grader.sandbox.client import Sandbox
from grader.sandbox.errors import StudentError, WorkerLost
from grader.sandbox.modes import mode
from grader.sandbox.worker.limits import Limits

pytestmark = pytest.mark.sandbox
AS_ROOT = pytest.mark.skipif(mode() != "root", reason=f"needs root and namespaces (here: {mode()!r} mode)")
ISOLATED = pytest.mark.skipif(mode() not in ("root", "userns"),
                              reason=f"needs the worker's own namespaces (here: {mode()!r} mode)")


def _groups_with(*controllers: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(mode() not in ("root", "setuid") or not set(controllers) <= cgroup.available(),
                              reason=f"needs cgroups with {', '.join(controllers)} (here: "
                              f"{sorted(cgroup.available()) or 'none'}; docs/grading.md, Threat model)")


MARKER = fresh_marker()
"""What the escaping processes sleep for: found in /proc, it means one survived."""
SHM_KEY = 0x18181818
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

ATTACKS = contained_code(MARKER)


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "attention.py").write_text(ATTACKS)
    return submission


def _descendants(pid: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            pass
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        return state(Path(f"/proc/{pid}")) != "Z"
    except OSError:
        return False


# -- one worker's share: memory, processes, CPU (its control group) --------------------------------------
@pytest.mark.slow  # it holds 1 GiB of the machine's memory for seconds
@_groups_with("memory")
def test_a_workers_processes_together_get_one_workers_memory(hostile, tmp_path):
    """Three children of 400 MiB each, held at once, do not fit in a 1 GiB group however the address
    space limit (per process) allows each of them."""
    limits = Limits(group_memory_bytes=1 << 30)
    box = Sandbox(hostile, tmp_path, limits=limits)
    try:
        box.ready()
        group = box.worker.group
        try:
            held = call(box, "hog", 3, 400)
            assert held < 3, "the OOM killer ended a child"
        except (WorkerLost, StudentError):
            pass  # or the worker itself
        assert group.memory_peak() <= limits.group_memory_bytes
    finally:
        box.close()


@_groups_with("pids")
def test_the_process_limit_is_the_groups(hostile, tmp_path):
    box = Sandbox(hostile, tmp_path)
    try:
        box.ready()
        folders = [folder for _, folder in box.worker.group.folders if (folder / "pids.max").exists()]
        assert [int((folder / "pids.max").read_text()) for folder in folders] == [box.limits.processes]
    finally:
        box.close()


@_groups_with("cpu", "cpuacct")
def test_busy_loops_in_new_sessions_get_one_core_together(hostile, tmp_path):
    """Eight busy children, each in a session of its own, use at most the group's one core between them
    (an upper bound: a loaded machine can only make them use less)."""
    box = Sandbox(hostile, tmp_path)
    try:
        box.ready()
        group = box.worker.group
        call(box, "spin", 8, 4.0)
        before, start = group.cpu_seconds(), time.monotonic()
        time.sleep(2.0)
        used, wall = group.cpu_seconds() - before, time.monotonic() - start
        assert used <= box.limits.cpus * wall * 1.2 + 0.1
    finally:
        box.close()


@_groups_with()
def test_closing_a_worker_kills_its_group_and_removes_it(hostile, tmp_path):
    box = Sandbox(hostile, tmp_path)
    box.ready()
    group = box.worker.group
    call(box, "escape")
    inside = cgroup._processes([folder for _, folder in group.folders])
    escaped = survivors(MARKER)
    assert escaped and set(escaped) <= inside, "double forks and new sessions stay in the group"
    box.close()
    assert survivors(MARKER) == []
    assert not any(folder.exists() for _, folder in group.folders)


def test_where_no_group_can_be_made_the_worker_runs_without_one(hostile, tmp_path, monkeypatch):
    """A laptop, a container with a read-only cgroupfs: the per-process limits (and the PID namespace
    where there is one) are what holds; the worker still runs."""
    monkeypatch.setattr(cgroup, "_hierarchies", lambda: ())
    box = Sandbox(hostile, tmp_path)
    try:
        assert call(box, "shm", SHM_KEY + 2, False) is False
        assert box.worker.group is None and box.worker.cpu_seconds() >= 0  # counted from /proc instead
    finally:
        box.close()


# -- nothing of a grading outlives its judge -------------------------------------------------------------
JUDGE = textwrap.dedent("""\
    import sys
    from pathlib import Path
    if sys.argv[3] == "forked":
        import torch  # first: the sandbox then forks its template (as a grading's judge does)
    from grader.sandbox.client import Sandbox

    box = Sandbox(Path(sys.argv[1]), Path(sys.argv[2]))
    box.request({"op": "import", "module": "attention"}, 600)  # never returns: the import hangs
    """)


def _judge_process(template: str, submission: Path, scratch: Path) -> subprocess.Popen:
    """A judge importing `submission` with its template launched or forked, or grade-all's judge process
    ("runner": the grading in a fork of it), in a session of its own."""
    env = {key: value for key, value in os.environ.items() if key != "GRADER_SALT"}
    if template != "runner":
        return subprocess.Popen([sys.executable, "-c", JUDGE, str(submission), str(scratch), template],
                                start_new_session=True, env=env)
    judge = subprocess.Popen([sys.executable, "-m", "grader.instructor.runner"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, start_new_session=True, env=env, text=True)
    options = GradeOptions(components=("attention",)).to_json()
    judge.stdin.write(json.dumps({"folder": str(submission.parent), "name": submission.name,
                                  "options": options}) + "\n")
    judge.stdin.flush()
    return judge


@ISOLATED
@pytest.mark.parametrize("template", [pytest.param("launched", marks=pytest.mark.slow), "forked",
                                      pytest.param("runner", marks=pytest.mark.slow)])
def test_nothing_of_a_grading_survives_its_judge_killed_mid_import(tmp_path, template):
    """The judge SIGKILLed while the submission's import hangs, after it started a child and a
    daemon (the OOM killer or grade-all's backstop would): 5 s later none of its processes is left,
    whether the sandbox's template was launched (a process that has graded before) or forked from the
    judge (a grading's), or the judge is grade-all's judge process, which grades in a fork of itself."""
    submission = tmp_path / "submission"
    submission.mkdir()
    hang = "escape()\nwhile True:\n    time.sleep(1)\n"
    (submission / "attention.py").write_text(contained_code(MARKER) + hang)
    (tmp_path / "scratch").mkdir()
    judge = _judge_process(template, submission, tmp_path / "scratch")
    try:
        deadline = time.monotonic() + 120
        while len(survivors(MARKER)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(survivors(MARKER)) == 2, "the submission's import started its escapes"
        grading = _descendants(judge.pid)
        children = Path(f"/proc/{judge.pid}/task/{judge.pid}/children").read_text().split()
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in [judge.pid, *children]}
        assert (len(names) == 1) == (template != "launched"), names  # a fork has the judge's name
        os.kill(judge.pid, signal.SIGKILL)
        judge.wait()
        time.sleep(5)
        assert [pid for pid in grading if _alive(pid)] == []
        assert survivors(MARKER) == []
    finally:
        if judge.poll() is None:
            judge.kill()
        judge.wait()
        cgroup.kill_judge(judge.pid)  # what grade-all's backstop does; here only if the test failed
        cgroup.kill_gone_judges()


@_groups_with()
def test_killing_a_judges_groups_ends_its_workers(hostile, tmp_path):
    """grade-all's backstop: the judge's groups are killed, whatever session its workers are in."""
    box = Sandbox(hostile, tmp_path)
    try:
        box.ready()
        call(box, "escape")
        assert survivors(MARKER)
        cgroup.kill_judge(os.getpid())
        assert survivors(MARKER) == []
        deadline = time.monotonic() + 10
        while box.worker._alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not box.worker._alive()
    finally:
        box.close()


# -- what the host shares: SysV IPC, the disk -------------------------------------------------------------
@ISOLATED
def test_sysv_shared_memory_is_refused(hostile, tmp_path):
    """A worker neither sees the host's SysV segments nor makes one (seccomp refuses shmget): none can
    outlive it, in a mode that shares the host's IPC namespace too."""
    host_segment = _libc.shmget(SHM_KEY, 1 << 20, 0o1000 | 0o600)
    assert host_segment >= 0
    box = Sandbox(hostile, tmp_path)
    try:
        assert call(box, "shm", SHM_KEY, False) is False, "the host's segment is not seen"
        assert call(box, "shm", SHM_KEY + 1, True) is False
    finally:
        box.close()
        _libc.shmctl(host_segment, 0, None)  # IPC_RMID
    assert _libc.shmget(SHM_KEY + 1, 0, 0) < 0, "no segment of the worker's on the host"


@AS_ROOT
def test_the_home_is_a_small_tmpfs_and_tmp_is_read_only(hostile, tmp_path):
    box = Sandbox(hostile, tmp_path)
    try:
        home = call(box, "fill", ".")
        tmp = call(box, "fill", "/tmp")
    finally:
        box.close()
    assert home <= box.limits.scratch_bytes >> 20 and tmp == 0
    assert home >= 16, "the home is still writable"
    assert not any(path.name.startswith("fill") for path in tmp_path.rglob("*")), "nothing on the host's disk"
