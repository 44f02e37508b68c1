"""grader grade-all on a small class, for real: a run interrupted as by Ctrl-C and resumed, the
gradebook and the summary, each JSON the same as `grader grade`'s, a rerun that grades only what
changed, and the same gradebook from a real Dask cluster (a scheduler and two workers on 127.0.0.1).
Graded with --only quiz, the cheapest component: these tests are about the class, not the grade."""
import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.instructor.gradebook import HEADER
from grader.spec import COMPONENTS
from helpers import EXAMPLES, load_bugs, local_dask_cluster, notebook_of, zip_of

CORRECT = EXAMPLES / "correct"

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.xdist_group("grade_all")]
ONLY = ("--only", "quiz")  # the cheapest component: these tests are about the class, not the grade


# Python's own SIGINT handler (KeyboardInterrupt), as at a terminal, even where the tests run with
# SIGINT ignored (a background job of a shell), which a child inherits.
INTERRUPTIBLE = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "from grader.cli import main; sys.exit(main(sys.argv[1:]))")


def grade_all(*args: str | Path, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [sys.executable, "-c", INTERRUPTIBLE, "grade-all", *map(str, args), *ONLY]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def to_grade(stderr: str) -> int:
    """How many submissions a run said it would grade ("5 submissions (...): N to grade, ...")."""
    line = next(line for line in stderr.splitlines() if " to grade, " in line)
    return int(line.split(": ")[1].split()[0])


@pytest.fixture(scope="module")
def classroom(tmp_path_factory) -> Path:
    """alice: the correct folder; bob: a zip of a quiz bug; carol: a notebook without exercise
    cells; dave: an empty folder; erin: a corrupt zip."""
    root = tmp_path_factory.mktemp("grade-all")
    shutil.copytree(CORRECT, root / "class" / "alice")
    bugs = load_bugs()
    zip_of(bugs.materialize(bugs.BY_NAME["quiz_wrong_answer"], root / "bugs"), root / "class" / "bob.zip")
    notebook_of(root / "class" / "carol.ipynb", {})
    (root / "class" / "dave").mkdir()
    (root / "class" / "erin.zip").write_bytes(b"PK\x03\x04 cut short")
    return root


@pytest.fixture(scope="module")
def graded(classroom) -> dict:
    """The class graded: a first run interrupted (SIGINT, as Ctrl-C) once alice's JSON is written,
    then a second run that finishes."""
    out = classroom / "out"
    first = grade_all(classroom / "class", "--out", out, "--jobs", "1", wait=False)
    deadline = time.monotonic() + 300
    while not (out / "alice.json").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    first.send_signal(signal.SIGINT)
    _, first_stderr = first.communicate(timeout=120)
    interrupted = {"returncode": first.returncode, "stderr": first_stderr,
                   "gradebook": (out / "gradebook.csv").read_text(),
                   "alice": (out / "alice.json").read_text(),
                   "alice_mtime": (out / "alice.json").stat().st_mtime_ns}
    second = grade_all(classroom / "class", "--out", out, "--jobs", "2")
    assert second.returncode == 0, second.stderr
    return {"out": out, "interrupted": interrupted, "resumed": second}


def test_ctrl_c_loses_nothing_and_the_rerun_grades_the_rest(graded):
    interrupted, out = graded["interrupted"], graded["out"]
    assert interrupted["returncode"] == 130, interrupted["stderr"]
    assert "pending" in interrupted["gradebook"] and "interrupted" in interrupted["stderr"]
    assert json.loads(interrupted["alice"])["score"] == 5
    assert to_grade(graded["resumed"].stderr) == 3  # bob, carol, erin: not alice again
    assert (out / "alice.json").stat().st_mtime_ns == interrupted["alice_mtime"]


def test_the_gradebook_and_the_summary(graded):
    out = graded["out"]
    with open(out / "gradebook.csv", newline="") as file:
        rows = list(csv.reader(file))
    assert tuple(rows[0]) == HEADER
    assert HEADER == ("student", "total", *COMPONENTS, "status")
    by_student = {row[0]: dict(zip(HEADER, row, strict=True)) for row in rows[1:]}
    assert [(s, r["total"], r["quiz"], r["status"]) for s, r in by_student.items()] == [
        ("alice", "5", "5", "graded"), ("bob", "4.25", "4.25", "graded"), ("carol", "0", "", "unreadable"),
        ("dave", "0", "", "empty"), ("erin", "0", "", "unreadable")]  # nothing gradable: 0, with why
    assert by_student["alice"]["attention"] == ""  # not graded with --only quiz: blank, not 0
    text = (out / "summary.md").read_text()
    assert "## Scores" in text and "| 4–4.5 | 1 | █ |" in text and "| 4.5–5 | 1 | █ |" in text
    assert "| 50% | 1/2 | quiz | quiz_q" in text  # bob's wrong answer: half the class fails it
    assert "| carol | unreadable | carol.ipynb has no cell starting with \\`%%writefile" in text  # inert
    assert "| dave | empty | dave/ holds no file |" in text
    for figure in ("scores.png", "failures.png"):
        assert (out / figure).read_bytes().startswith(b"\x89PNG")


def test_each_json_is_what_grader_grade_writes(graded, classroom, tmp_path):
    own = tmp_path / "alice.json"
    subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(classroom / "class" / "alice"),
                    "--json", str(own), *ONLY], check=True, capture_output=True, timeout=300)
    assert json.loads((graded["out"] / "alice.json").read_text()) == json.loads(own.read_text())


def test_a_rerun_grades_only_what_changed(graded, classroom):
    out = graded["out"]
    again = grade_all(classroom / "class", "--out", out)
    assert again.returncode == 0 and to_grade(again.stderr) == 0, again.stderr
    state = json.loads((out / ".grade-all-state.json").read_text())
    (classroom / "class" / "erin.zip").write_bytes(b"PK\x03\x04 cut short, differently")
    changed = grade_all(classroom / "class", "--out", out)
    assert changed.returncode == 0 and to_grade(changed.stderr) == 1, changed.stderr
    after = json.loads((out / ".grade-all-state.json").read_text())
    assert after["erin"]["hash"] != state["erin"]["hash"]
    assert {k: v for k, v in after.items() if k != "erin"} == {k: v for k, v in state.items() if k != "erin"}


def test_regrade_timed_out_grades_only_those_again_keeping_the_others(graded, classroom):
    """bob's grading stalled (as on a loaded machine): `--regrade timed_out` grades bob alone again, with
    more patience, under the hash he had; a plain rerun then keeps everyone."""
    out = graded["out"]
    state_file = out / ".grade-all-state.json"
    state = json.loads(state_file.read_text())
    state["bob"] = {**state["bob"], "status": "timed_out", "message": "1 test(s) stalled on a loaded machine"}
    state_file.write_text(json.dumps(state))
    again = grade_all(classroom / "class", "--out", out, "--regrade", "timed_out")
    assert again.returncode == 0 and to_grade(again.stderr) == 1, again.stderr
    after = json.loads(state_file.read_text())
    assert after["bob"]["status"] == "graded" and after["bob"]["hash"] == state["bob"]["hash"]
    assert {k: v for k, v in after.items() if k != "bob"} == {k: v for k, v in state.items() if k != "bob"}
    rerun = grade_all(classroom / "class", "--out", out)
    assert rerun.returncode == 0 and to_grade(rerun.stderr) == 0, rerun.stderr


@pytest.fixture
def dask_cluster(tmp_path):
    """A real scheduler and two workers (helpers.local_dask_cluster)."""
    with local_dask_cluster(tmp_path, workers=2) as address:
        yield address


def test_a_dask_cluster_gives_the_same_gradebook(graded, classroom, dask_cluster, tmp_path):
    run = grade_all(classroom / "class", "--out", tmp_path / "out", "--scheduler", dask_cluster)
    assert run.returncode == 0, run.stderr
    assert f"on {dask_cluster}" in run.stderr
    # erin.zip may have been rewritten by the rerun test: compare the rows that do not depend on it
    local, remote = ([row for row in (out / "gradebook.csv").read_text().splitlines() if "erin" not in row]
                     for out in (graded["out"], tmp_path / "out"))
    assert remote == local
    for student in ("alice", "bob"):
        assert (json.loads((tmp_path / "out" / f"{student}.json").read_text())
                == json.loads((graded["out"] / f"{student}.json").read_text()))
