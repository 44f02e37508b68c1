"""The class-level proof of containment (issue 18): grade-all on a class that holds every attack of
test_contained.py, test_sandbox.py's forged replies and blocked pipe, and test_hostile_input.py's class
input beside correct submissions gives the correct ones exactly the JSON `grader grade` gives each
alone, and leaves no process, control group, SysV segment or file behind; the whole run stays within
its memory budget and writes next to nothing to disk.

The run is started in a control group of its own, so that what it used (every judge, worker and
child) is measured by the kernel, not sampled. Graded with --only quiz (the cheapest component: each
attack is in the submission's quiz.py, run when it is imported).
"""
import csv
import ctypes
import ctypes.util
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attacks import FORGED_REPLIES, OVERSIZED, blocking_code, contained_code, reply_code, sent
from grader.instructor.hostile import fresh_marker, survivors
from grader.instructor.runner import MAX_PAYLOAD_BYTES
from grader.sandbox import cgroup
from grader.sandbox.modes import mode
from grader.sandbox.worker.limits import Limits
from grader.spec import Status
from grader.submission import MAX_ZIP_BYTES
from helpers import EXAMPLES, zip_of

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.sandbox, pytest.mark.xdist_group("grade_all"),
              pytest.mark.skipif(mode() != "root" or not {"memory", "pids"} <= cgroup.available(),
                                 reason=f"needs root, namespaces and cgroups (here: {mode()!r} mode, "
                                        f"controllers {sorted(cgroup.available()) or 'none'})")]
CORRECT = EXAMPLES / "correct"
ONLY = ("--only", "quiz")
JOBS = 2
MARKER = fresh_marker()
SHM_KEY = 0x18180008
JUDGE_BYTES = 1536 << 20
"""What one judge process (the reference, the suites, torch) may hold, measured at about 0.5 GiB."""
FORGERS = (*FORGED_REPLIES, "oversized")
"""The students whose quiz.py sends the judge a forged reply."""
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _attacks() -> dict[str, str]:
    """Each attacker's quiz.py: on the worker's share of the machine (test_contained.py's, called at
    import), then on the judge (a forged reply each, and a pipe that stops moving both ways)."""
    contained = contained_code(MARKER)
    return {"outlive": contained + "escape()\n", "hog": contained + "hog(3, 1024)\n",
            "shm": contained + f"shm({SHM_KEY}, True)\n", "fill": contained + 'fill(".")\nfill("/tmp")\n',
            "spin": contained + "spin(56, 8)\n",
            **{name: reply_code(sent(body())) for name, body in FORGED_REPLIES.items()},
            "oversized": reply_code(OVERSIZED), "blocked": blocking_code()}


def _classroom(root: Path) -> Path:
    """Correct: alice, `@A1` (a formula-like id), devices (a FIFO, a device file and a socket beside its
    correct files). Attacks: one folder each, a FIFO entry, a notebook past the cap, a Canvas file
    named `..`, `-A2+B2.zip` with a bad CRC."""
    classroom = root / "class"
    classroom.mkdir()
    for name in ("alice", "@A1", "devices"):
        shutil.copytree(CORRECT, classroom / name)
    os.mkfifo(classroom / "devices" / "pipe.py")
    os.mknod(classroom / "devices" / "zero.py", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(classroom / "devices" / "socket.py"))
    for name, attack in _attacks().items():
        (classroom / name).mkdir()
        (classroom / name / "quiz.py").write_text(attack)
    os.mkfifo(classroom / "fifo.zip")
    with open(classroom / "huge.ipynb", "wb") as file:
        file.truncate(MAX_ZIP_BYTES + 1)
    (classroom / "mallory_12_22_..").write_text("ANSWERS = {}\n")
    zip_of(CORRECT, classroom / "-A2+B2.zip")
    data = (classroom / "-A2+B2.zip").read_bytes()
    (classroom / "-A2+B2.zip").write_bytes(data.replace(b"ANSWERS", b"ANSWERZ", 1))
    return classroom


def _disk_use(folder: Path, peak: list[int], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        total = 0
        for root, _, files in os.walk(folder):  # folders come and go meanwhile: os.walk skips those gone
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    pass
        peak[0] = max(peak[0], total)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("contained")
    classroom = _classroom(root)
    alone = root / "alone.json"
    subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(CORRECT), "--json", str(alone), *ONLY],
                   check=True, capture_output=True, timeout=300)
    tmp = root / "tmp"  # the run's temporary files, all of them, to be measured
    tmp.mkdir()
    group = cgroup.Group.create(memory_bytes=64 << 30, processes=4096, cpus=JOBS)
    peak, stop = [0], threading.Event()
    sampler = threading.Thread(target=_disk_use, args=(tmp, peak, stop))
    sampler.start()
    try:
        command = [sys.executable, "-m", "grader.cli", "grade-all", str(classroom),
                   "--out", str(root / "out"), "--jobs", str(JOBS), *ONLY]
        done = subprocess.run([*group.join_command(), *command], capture_output=True, text=True, timeout=1200,
                              env={**os.environ, "TMPDIR": str(tmp)})
        time.sleep(1)
        left = {"processes": cgroup._processes([folder for _, folder in group.folders]),
                "groups": [path for _, folder in group.folders for path in folder.rglob("judge-*")],
                "files": [path for path in tmp.rglob("*") if not path.name.startswith("torchinductor_")],
                "survivors": survivors(MARKER),
                "segment": _libc.shmget(SHM_KEY, 0, 0) >= 0}
        memory = group.memory_peak()
    finally:
        stop.set()
        sampler.join()
        group.remove()
    with open(root / "out" / "gradebook.csv", newline="") as file:
        rows = {row[0]: row[-1] for row in csv.reader(file)}
    return {"done": done, "alone": json.loads(alone.read_text()), "out": root / "out", "rows": rows,
            "left": left, "memory": memory, "disk": peak[0]}


def test_the_run_ends_and_every_student_has_a_row(run):
    assert run["done"].returncode == 0, run["done"].stderr
    assert run["rows"] == {
        "student": "status", "alice": "graded", "'@A1": "graded", "devices": "graded", "outlive": "graded",
        "hog": "graded", "shm": "graded", "fill": "graded", "spin": "graded",
        **{name: "graded" for name in (*FORGERS, "blocked")}, "fifo": "unreadable",
        "huge": "unreadable", "mallory_12": "unreadable", "'-A2+B2": "unreadable"}


def test_correct_submissions_get_exactly_what_they_get_alone(run):
    for student in ("alice", "@A1", "devices"):
        assert json.loads((run["out"] / f"{student}.json").read_text()) == run["alone"], student


def test_the_attacks_on_the_judge_reached_it_and_cost_their_own_grading_only(run):
    """Each forged reply was refused before anything was allocated for it (its worker lost: every quiz
    test crashed, saying why); the worker that answered its import early, then neither read nor wrote,
    was waited for until a deadline: every quiz test timed out. (Its shrunk request pipe stays below
    full here, quiz's requests being ~100 bytes: test_sandbox.py shows the judge's writes time out.)"""
    for student in FORGERS:
        tests = json.loads((run["out"] / f"{student}.json").read_text())["tests"]
        assert {test["status"] for test in tests} == {Status.CRASHED}, student
        assert all("the worker's reply was refused" in test["message"] for test in tests), student
    tests = json.loads((run["out"] / "blocked.json").read_text())["tests"]
    assert {test["status"] for test in tests} == {Status.TIMED_OUT}
    assert all("no answer within" in test["message"] for test in tests)


def test_nothing_is_left_behind(run):
    assert run["left"] == {"processes": set(), "groups": [], "files": [], "survivors": [], "segment": False}


def test_the_run_stays_within_its_memory_and_disk_budgets(run):
    """Memory: each of JOBS gradings a judge and one worker's group (Limits.group_memory_bytes, the
    hog's three gigabytes included); disk: a copy of each submission being graded, at most
    MAX_PAYLOAD_BYTES (huge.ipynb's 20 MiB), none of what the filler wrote (its tmpfs)."""
    budget = JOBS * (Limits().group_memory_bytes + JUDGE_BYTES)
    print(f"peak memory {run['memory'] / 2**30:.2f} GiB (budget {budget / 2**30:.2f}), "
          f"peak disk {run['disk'] / 2**20:.1f} MiB")
    assert run["memory"] <= budget
    assert run["disk"] <= JOBS * MAX_PAYLOAD_BYTES
