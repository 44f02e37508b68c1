"""Issue 29, "done" 1: each grading starts from a process that never held another grading's data.

A class of three, graded by grade-all with --only quiz (the cheapest component; each student's code is
their quiz.py, run at its import): two earlier students whose quiz.py raises with a marker of this run
in its message, which their scorecards quote in every quiz test (public and hidden) and so the reply each
grading process sends back; then a later one whose quiz.py scans all of its worker's readable memory and
files for that marker (tests/attacks.py, carryover_scan_code) and raises with what it found, which its own
scorecard quotes. The runner once forked each grading from the judge process that had read every earlier
reply: freed memory kept their bytes, and the later student's template and worker inherited them (at
9156a50 the scan found 14 copies with --jobs 1, 14 with --jobs 2, 22 on the Dask worker). Now each grading
is forked by a process that has read no request nor reply (runner._ForkServer).

With --jobs 2 each of the two judge processes grades one of the earlier students before the later one
(the first two jobs go one to each); on a Dask cluster of one worker with one thread, one judge process
grades all three in turn. Then what the fork server keeps of the judge process's old ways: a job it
cannot fork for is an error, never graded in the judge process, and Ctrl-C stops a grading in order.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.instructor import runner
from grader.instructor.hostile import carryover_marker, carryover_report, carryover_scan_code, raising_code
from grader.sandbox import cgroup
from grader.sandbox.modes import FORKED_MODES, mode
from helpers import ROOT, local_dask_cluster

pytestmark = [pytest.mark.sandbox, pytest.mark.xdist_group("grade_all")]
AS_ROOT = pytest.mark.skipif(mode() != "root", reason=f"grade-all's gradings as root (here: {mode()!r} mode)")
ONLY = ("--only", "quiz")
EARLIER = ("a-earlier", "b-earlier")
LATER = "z-later"
CORRECT = ROOT / "examples" / "submissions" / "correct"


@pytest.fixture(scope="module")
def classroom(tmp_path_factory) -> tuple[Path, str]:
    """The class (EARLIER, then LATER, in the order grade-all grades them: by name) and its marker."""
    marker = carryover_marker()
    classroom = tmp_path_factory.mktemp("carryover") / "class"
    codes = {**dict.fromkeys(EARLIER, raising_code(marker)), LATER: carryover_scan_code(marker)}
    for name, code in codes.items():
        (classroom / name).mkdir(parents=True)
        (classroom / name / "quiz.py").write_text(code)
    return classroom, marker


def _graded(classroom: tuple[Path, str], out: Path, *options: str) -> dict:
    """grade-all on the class: what LATER's scan reported, after checking that the marker reached the
    earlier students' scorecards (so their gradings' replies), hidden tests included."""
    folder, marker = classroom
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade-all", str(folder), "--out", str(out),
                           *ONLY, *options], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for name in EARLIER:
        tests = json.loads((out / f"{name}.json").read_text())["tests"]
        assert len(tests) > 1 and all(marker in test["message"] for test in tests), name
    report = carryover_report(json.loads((out / f"{LATER}.json").read_text())["tests"][0]["message"])
    print(f"{LATER}'s scan: {report}")
    assert report["probe"]["memory"] >= 1 and report["probe"]["files"] >= 1, "the scan sees what is there"
    assert report["mebibytes"] >= 100, "torch's and the grader's memory was read"
    assert report["forked"], "the worker holds its grading process's memory, as a fork of it"
    return report


@AS_ROOT
@pytest.mark.slow
@pytest.mark.smoke  # the quick form: one judge process grades all three in turn
def test_a_later_student_finds_nothing_of_an_earlier_ones_scorecard_with_one_job(classroom, tmp_path):
    assert _graded(classroom, tmp_path / "out", "--jobs", "1")["found"] == {"memory": 0, "files": 0}


@AS_ROOT
@pytest.mark.slow
def test_a_later_student_finds_nothing_of_an_earlier_ones_scorecard_with_two_jobs(classroom, tmp_path):
    assert _graded(classroom, tmp_path / "out", "--jobs", "2")["found"] == {"memory": 0, "files": 0}


@pytest.fixture
def dask_worker(tmp_path) -> str:
    """A real scheduler and one worker with one thread, so that one judge process grades the class in turn
    (helpers.local_dask_cluster)."""
    with local_dask_cluster(tmp_path, workers=1) as address:
        yield address


@AS_ROOT
@pytest.mark.slow
def test_a_later_student_finds_nothing_of_an_earlier_ones_scorecard_on_a_dask_worker(classroom, dask_worker,
                                                                                     tmp_path):
    report = _graded(classroom, tmp_path / "out", "--scheduler", dask_worker)
    assert report["found"] == {"memory": 0, "files": 0}


# -- the runner's fork server: when it cannot fork, and Ctrl-C -----------------------------------------
FORKS = pytest.mark.skipif(mode() not in FORKED_MODES, reason=f"no fork server in {mode()!r} mode")
RUNNER = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
          "runpy.run_module('grader.instructor.runner', run_name='__main__')\n")
"""The judge process as grade-all starts it from a terminal: with Python's SIGINT handler, even where the
tests run with SIGINT ignored (a background job of a shell), which a child inherits."""


def _request(folder: Path) -> str:
    options = {"components": ["quiz"]}
    return json.dumps({"folder": str(folder.parent), "name": folder.name, "options": options})


@FORKS
def test_a_fork_server_that_cannot_fork_makes_the_job_an_error_never_grades_it_in_the_judge(tmp_path):
    """No process to spare (the fork server's fork fails): the job is an ERROR outcome that says so, and
    the judge process grades the next job once a fork succeeds again. The job is never graded in the
    judge process itself, whose memory holds every reply it has read."""
    shutil.copytree(CORRECT, tmp_path / "alice")
    failing = ("import os, runpy\n"
               "fork, forks = os.fork, []\n"
               "def refusing():\n"  # the first fork starts the fork server, the second would grade
               "    forks.append(1)\n"
               "    if len(forks) == 2:\n"
               "        raise BlockingIOError(11, 'Resource temporarily unavailable')\n"
               "    return fork()\n"
               "os.fork = refusing\n" + RUNNER)
    request = _request(tmp_path / "alice")
    done = subprocess.run([sys.executable, "-c", failing], input=f"{request}\n{request}\n", text=True,
                          capture_output=True, timeout=300, cwd=ROOT)
    first, second = map(json.loads, done.stdout.splitlines())
    assert first == {"outcome": runner.Outcome.ERROR.value,
                     "message": "no process to spare: the grading could not start (Resource temporarily "
                                "unavailable)"}
    assert second["outcome"] == "graded" and second["card"]["score"] == second["card"]["max_score"] > 0


@FORKS
def test_ctrl_c_lets_the_grading_close_its_sandbox_and_nothing_outlives_the_judge_process(tmp_path):
    """SIGINT to the judge process's group mid-grading (grade-all's Ctrl-C: runner._stop): the fork server
    ignores it, the grading process stops its sandbox and ends, the judge process waits for it, then ends
    on its own, within runner.STOP_SECONDS, and the fork server with it: no process of the tree is left,
    nor the grading's control groups."""
    shutil.copytree(CORRECT, tmp_path / "alice")
    (tmp_path / "alice" / "quiz.py").write_text("import time\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", RUNNER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                               start_new_session=True)
    try:
        process.stdin.write(_request(tmp_path / "alice") + "\n")
        process.stdin.flush()
        deadline = time.monotonic() + 120
        tree = _tree(process.pid)
        while len(tree) < 5 and time.monotonic() < deadline:  # judge, server, grading, template(s), worker
            time.sleep(0.2)
            tree = _tree(process.pid)
        assert len(tree) >= 5, tree
        time.sleep(1)  # the worker is importing quiz.py
        grading = tree[2]
        os.killpg(process.pid, signal.SIGINT)
        process.wait(runner.STOP_SECONDS)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == -signal.SIGINT, "it ended on its own (KeyboardInterrupt), not killed"
    time.sleep(0.5)
    assert [pid for pid in tree if _alive(pid)] == []
    assert [folder for _, folder in cgroup._judge_folders(grading) if folder.exists()] == []


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (those alive and not zombies), parents before their children."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found = [pid]
    for parent in found:  # grows as it goes: breadth first
        found.extend(sorted(parents.get(parent, [])))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False
