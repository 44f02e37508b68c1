"""`grader check` where the platform lacks what Linux has: macOS and Windows, imitated here (no such
machine is available): tests/imitate/sitecustomize.py takes away, in the judge and in every worker,
what each lacks of the POSIX API the sandbox used (RLIMIT_AS and sched_getaffinity on macOS; the
resource and fcntl modules, os.killpg, os.setsid, select.poll, SIGXCPU and /proc on Windows). The
reference must get every public point and the stubs must read "not attempted", as on Linux, with the
limits not set said plainly; a hang must be said once, where it is, and block the rest, as on Linux."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.suites import all_cases
from helpers import ROOT

IMITATION = ROOT / "tests" / "imitate"
GROUP = "the memory of its processes together"  # not root: no control group
NOT_SET = {"macos": {"memory", "address space", GROUP},
           "windows": {"memory", "address space", "output", "open files", "CPU time", "core dumps", GROUP}}


def _check(platform: str, submission: Path, tmp_path: Path, *options: str) -> tuple[dict, str]:
    card, log = tmp_path / f"{submission.name}-{platform}.json", tmp_path / "imitating.log"
    imitation = {"PYTHONPATH": str(IMITATION), "GRADER_IMITATE": platform, "GRADER_IMITATE_LOG": str(log)}
    # "plain" mode, as macOS and Windows have (and Linux here, to compare)
    env = {**os.environ, **(imitation if platform != "linux" else {}), "GRADER_SANDBOX": "plain"}
    done = subprocess.run([sys.executable, "-m", "grader.cli", "check", str(submission), "--json", str(card),
                           *options], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    if platform == "linux":
        return json.loads(card.read_text()), done.stdout
    lines = log.read_text().splitlines()
    assert any(" -m grader.cli check " in line for line in lines), "the judge imitates"
    assert any(".jail " in line for line in lines), "the workers imitate"
    return json.loads(card.read_text()), done.stdout


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("platform", ["macos", "windows"])
def test_the_public_check_runs_the_same_with_what_the_platform_allows(platform: str, tmp_path: Path):
    mine = tmp_path / "mine"
    shutil.copytree(ROOT / "solutions", mine, ignore=shutil.ignore_patterns("__pycache__"))
    card, out = _check(platform, mine, tmp_path)
    failed = [f"{t['name']}: {t['status']} {t['message']}" for t in card["tests"] if t["status"] != "passed"]
    assert not failed
    assert card["score"] == card["max_score"] == sum(case.points for case in all_cases(public_only=True))
    isolation = card["sandbox"]
    assert isolation["mode"] == "plain"
    assert {note.split(" (")[0] for note in isolation["not_set"]} == NOT_SET[platform]
    assert f"isolation: {isolation['summary']}" in out
    assert "with time limits (not available here: memory" in out

    card, _ = _check(platform, ROOT / "exercises", tmp_path)
    assert {t["status"] for t in card["tests"]} == {"not_attempted"} and card["score"] == 0


@pytest.mark.parametrize("platform", ["macos", "windows"])
def test_the_default_number_of_jobs_needs_no_sched_getaffinity(platform: str, tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(IMITATION), "GRADER_IMITATE": platform}
    probe = ("import os; from grader.instructor.runner import default_workers; "
             "print(default_workers(), os.cpu_count())")
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    workers, cores = done.stdout.split()
    assert workers == cores


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_hang_without_sigxcpu_or_proc_is_said_once_where_it_is_and_blocks_the_rest(tmp_path: Path):
    """Windows: no SIGXCPU to ask the worker where it is, and the wall clock for the CPU one. The worker's
    watchdog stops the hanging code itself: one test says where, the later ones are blocked at once, as on
    Linux (the same check without the imitation), and in the same order of time."""
    submission = shutil.copytree(ROOT / "examples" / "submissions" / "correct", tmp_path / "hang")
    source = (submission / "attention.py").read_text()
    signature = source.index(") -> tuple", source.index("def scaled_dot_product_attention"))
    body = source.index(":\n", signature) + 2
    (submission / "attention.py").write_text(f"{source[:body]}    while True:\n        pass\n{source[body:]}")
    seconds, verdicts = {}, {}
    for platform in ("linux", "windows"):
        start = time.monotonic()
        card, _ = _check(platform, submission, tmp_path, "--only", "attention")
        seconds[platform] = time.monotonic() - start
        verdicts[platform] = {(t["status"], t["message"]) for t in card["tests"] if t["status"] != "passed"}
    assert verdicts["windows"] == verdicts["linux"], seconds
    spent = [message for _, message in verdicts["windows"] if "used up the test's CPU time limit" in message]
    assert len(spent) == 1 and "in attention.py, line" in spent[0], verdicts
    assert ", in scaled_dot_product_attention (" in spent[0]
    blocked = {message for _, message in verdicts["windows"]} - set(spent)
    hung = "blocked: scaled_dot_product_attention (attention.py) did not return within 8 s"
    assert len(blocked) == 1 and blocked.pop().startswith(hung)
    assert {status for status, _ in verdicts["windows"]} == {"timed_out"}
    assert seconds["windows"] < 3 * seconds["linux"], seconds


WATCHDOG = """
import time
from grader.sandbox.worker.serve import TimeLimit, Watchdog

watchdog = Watchdog()
with watchdog.armed(0.2):
    pass
start = time.process_time()
while time.process_time() < start + 0.5:  # past its block, its seconds no longer count
    pass
start = time.process_time()
try:
    with watchdog.armed(0.3):
        while True:
            pass
except TimeLimit:
    print(time.process_time() - start)
"""


def test_the_watchdog_stops_a_loop_once_its_cpu_seconds_are_used_and_nothing_after_its_block(tmp_path: Path):
    """Where there is no SIGXCPU, the worker's own thread stops the student's code (a process of its own:
    a thread left in the test process would keep later gradings from forking their template)."""
    done = subprocess.run([sys.executable, "-c", WATCHDOG], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert 0.3 <= float(done.stdout) < 1.0
