"""`grader check` where the platform lacks what Linux has: macOS and Windows, imitated here (no such
machine is available): tests/imitate/sitecustomize.py takes away, in the judge and in every worker,
what each lacks of the POSIX API the sandbox used (RLIMIT_AS and sched_getaffinity on macOS; the
resource and fcntl modules, os.killpg and os.setsid on Windows). The reference must get every public
point and the stubs must read "not attempted", as on Linux, with the limits not set said plainly."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.suites import all_cases
from helpers import ROOT

IMITATION = ROOT / "tests" / "imitate"
GROUP = "the memory of its processes together"  # not root: no control group
NOT_SET = {"macos": {"memory", "address space", GROUP},
           "windows": {"memory", "address space", "output", "open files", "CPU time", "core dumps", GROUP}}


def _check(platform: str, submission: Path, tmp_path: Path) -> tuple[dict, str]:
    card, log = tmp_path / f"{submission.name}.json", tmp_path / "imitating.log"
    env = {**os.environ, "PYTHONPATH": str(IMITATION), "GRADER_IMITATE": platform,
           "GRADER_IMITATE_LOG": str(log), "GRADER_SANDBOX": "plain"}  # macOS and Windows: "plain" mode
    done = subprocess.run([sys.executable, "-m", "grader.cli", "check", str(submission), "--json", str(card)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
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
