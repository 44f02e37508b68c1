"""The same grade on any machine, under any load: the reference and a buggy submission graded idle,
with the machine oversubscribed 10 times (busy processes, each in its own session), and on half a CPU
(a cgroup quota, as Gradescope's half a vCPU) get the same JSON, test for test. Graded with --only
attention,block (the components a loaded machine used to time out): CPU seconds cost the same in all."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import EXAMPLES, load_bugs
from load import busy_processes, cores, half_a_cpu

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.xdist_group("load")]
ONLY = "attention,block"
BUG = "softmax_over_queries"


def grade(submission: Path, out: Path, prefix: list[str] | None = None) -> dict:
    command = [*(prefix or []), sys.executable, "-m", "grader.cli", "grade", str(submission),
               "--json", str(out), "--only", ONLY]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def submissions(tmp_path_factory) -> dict[str, Path]:
    bugs = load_bugs()
    return {"correct": EXAMPLES / "correct",
            BUG: bugs.materialize(bugs.BY_NAME[BUG], tmp_path_factory.mktemp("bug"))}


@pytest.fixture(scope="module")
def idle(submissions, tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("idle")
    cards = {name: grade(path, out / f"{name}.json") for name, path in submissions.items()}
    assert cards["correct"]["score"] == cards["correct"]["max_score"]
    assert cards[BUG]["components"]["attention"]["score"] < cards[BUG]["components"]["attention"]["max_score"]
    return cards


@pytest.mark.heavy  # minutes: its quick form in every run is the half-CPU test below
def test_ten_times_oversubscribed_gives_the_same_json(submissions, idle, tmp_path):
    with busy_processes(10 * cores()):
        loaded = {name: grade(path, tmp_path / f"{name}.json") for name, path in submissions.items()}
    assert loaded == idle


def test_half_a_cpu_gives_the_same_json(submissions, idle, tmp_path):
    with half_a_cpu() as (prefix, how):
        quota = {name: grade(path, tmp_path / f"{name}.json", prefix) for name, path in submissions.items()}
    assert quota == idle, how
