"""Time limits that measure the student's code, not the machine: the worker's CPU seconds (its children's
too, never its sleep), a wall-clock backstop only for a worker that sleeps or waits, a function that ran
out of time blocked in every later call, and a timeout the machine caused (stalled) never taken as final.
No assertion here is on wall-clock time."""
import json
import shutil
import textwrap

import pytest

from grader.instructor.gradebook import Row, summary
from grader.instructor.runner import Outcome, VersionMismatch, _graded, grade_jobs, grader_version, pins
from grader.judge import judge
from grader.sandbox.client import Sandbox
from grader.sandbox.clocks import ASLEEP, CPU, STALLED
from grader.sandbox.errors import StudentError, WorkerLost
from grader.spec import Status
from helpers import EXAMPLES, as_case, run_on_solutions

SUBMISSION = textwrap.dedent("""\
    import subprocess
    import sys
    import time

    def busy(seconds):  # CPU seconds, whatever the load
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    def busy_child(seconds):
        subprocess.run([sys.executable, "-c", f"from attention import busy; busy({seconds})"], check=True,
                       cwd=__file__.rpartition("/")[0])

    def nap(seconds):
        time.sleep(seconds)

    def hang():
        while True:
            pass

    def calls_hang():
        return hang()

    def fine(x):
        return 2 * x
    """)


@pytest.fixture
def sandbox(tmp_path):
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "attention.py").write_text(SUBMISSION)
    box = Sandbox(submission, tmp_path)
    box.ready()
    yield box
    box.close()


def call(box: Sandbox, target: str, *args, limit: float = 30.0):
    return box.request({"op": "call", "target": f"attention.{target}", "args": list(args)}, limit)["result"]


def spent(box: Sandbox, target: str, *args) -> float:
    """The CPU seconds the sandbox's clock counts for one call."""
    before = box.cpu_seconds()
    call(box, target, *args)
    return box.cpu_seconds() - before


@pytest.mark.sandbox
def test_the_clock_counts_the_workers_cpu_and_its_childrens_not_its_sleep(sandbox):
    assert spent(sandbox, "busy", 0.5) >= 0.45
    assert spent(sandbox, "busy_child", 0.5) >= 0.45
    assert spent(sandbox, "nap", 0.5) < 0.2


@pytest.mark.sandbox
def test_a_hang_says_where_it_is_and_that_function_is_then_refused_wherever_it_is_called(sandbox):
    with pytest.raises(WorkerLost) as lost:
        call(sandbox, "calls_hang", limit=0.5)
    assert lost.value.timeout == CPU
    assert (lost.value.function, lost.value.where) == ("attention.hang", "attention.py, line 18, in hang")
    assert sandbox.cpu_seconds() >= 0.5  # what it used is kept when the worker is replaced
    sandbox.refuse("attention.hang", "said once")
    with pytest.raises(StudentError) as blocked:
        call(sandbox, "calls_hang")  # through the module's own global, at once: no time limit to wait for
    assert (blocked.value.type_name, blocked.value.message) == ("Blocked", "said once")
    assert call(sandbox, "fine", 3) == 6


@pytest.mark.sandbox
def test_a_sleeping_worker_is_stopped_by_the_backstop_and_said_to_sleep(sandbox):
    with pytest.raises(WorkerLost) as lost:
        call(sandbox, "nap", 10**6, limit=0.2)
    if lost.value.timeout == STALLED:  # a kernel without schedstat cannot tell sleep from starvation
        pytest.skip("this kernel does not say how long a process waited for a CPU (/proc/PID/schedstat)")
    assert lost.value.timeout == ASLEEP and lost.value.function == "attention.nap"


@pytest.mark.sandbox
def test_a_stalled_test_is_marked_so_and_its_submission_is_timed_out_not_graded(tmp_path):
    def starved(student):
        """a test the machine starved"""
        raise WorkerLost("no answer within the backstop", STALLED)

    result = run_on_solutions(as_case(starved), tmp_path)
    assert result.status is Status.STALLED and result.score == 0
    assert "not a verdict on your code" in result.message
    card = {"score": 0, "max_score": 1, "components": {}, "tests": [result.to_json()]}
    outcome = _graded(card, 1.0)
    assert outcome["outcome"] == Outcome.TIMED_OUT and outcome["card"] == card
    assert "--regrade timed_out" in outcome["message"]
    text = summary([Row("alice", Outcome.TIMED_OUT, outcome["message"], card)], grader_version())
    assert "1 timed_out" in text and "| alice | timed_out | 1 test" in text and "stalled" in text


def test_the_grader_version_holds_the_versions_that_decide_the_draws(monkeypatch):
    assert set(pins()) == {"hypothesis", "numpy", "torch", "python"}
    here = grader_version()
    monkeypatch.setattr("grader.instructor.runner.pins", lambda: {**pins(), "hypothesis": "0.0.1"})
    grader_version.cache_clear()
    try:
        assert grader_version() != here
    finally:
        monkeypatch.undo()
        grader_version.cache_clear()


def test_a_worker_with_other_versions_is_refused_naming_the_package(monkeypatch):
    other = {**pins(), "numpy": "0.0.1"}
    monkeypatch.setattr("grader.instructor.runner.grade_job",
                        lambda job: {"grader": grader_version(), "pins": other})
    with pytest.raises(VersionMismatch, match=r"numpy 0\.0\.1 \(here "):
        list(grade_jobs([object()], workers=1))


@pytest.mark.slow
@pytest.mark.sandbox
def test_an_infinite_loop_in_attention_is_reported_once_and_blocks_the_rest_at_once(tmp_path):
    """`grader check --only attention` with scaled_dot_product_attention looping: one test spends its
    CPU time limit and names the line; every later test that reaches the function says so at once."""
    submission = shutil.copytree(EXAMPLES / "correct", tmp_path / "hang")
    source = (submission / "attention.py").read_text()
    signature = source.index(") -> tuple", source.index("def scaled_dot_product_attention"))
    body = source.index(":\n", signature) + 2
    (submission / "attention.py").write_text(f"{source[:body]}    while True:\n        pass\n{source[body:]}")
    results = [r for r in judge(submission, public_only=True, components=("attention",))
               if r.status is not Status.PASSED]
    spent = [r for r in results if "used up the test's CPU time limit" in r.message]
    assert len(spent) == 1 and "in attention.py, line" in spent[0].message, [r.message for r in results]
    blocked = {r.message for r in results if r is not spent[0]}
    assert blocked == {f"blocked: scaled_dot_product_attention (attention.py) did not return within 8 s (see "
                       f"attention.{spent[0].name})"}
    assert all(r.status is Status.TIMED_OUT for r in results)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_hanging_feedforward_blocks_what_calls_it_and_nothing_else(tmp_path):
    """The examples' `hang` bug: block's tests are blocked by feedforward at once; analysis's tests that
    never call the feed-forward network pass."""
    from helpers import load_bugs

    bugs = load_bugs()
    submission = bugs.materialize(bugs.BY_NAME["hang"], tmp_path)
    results = judge(submission, components=("feedforward", "block", "analysis"))
    hung = [r for r in results if "used up the test's CPU time limit" in r.message]
    assert len(hung) == 1 and hung[0].component == "feedforward"
    block = [r for r in results if r.component == "block" and r.status is not Status.PASSED]
    assert block and all(r.message.startswith("blocked by feedforward (it hangs): FeedForward.forward") for r
                         in block)
    analysis = {r.name: r for r in results if r.component == "analysis"}
    assert analysis["stripe_scores_match_reference"].status is Status.PASSED
    assert not [r for r in results if "used up their" in r.message]
    json.dumps([r.to_json() for r in results])  # nothing in them that the JSON cannot hold


def test_a_test_not_run_for_lack_of_time_makes_the_grading_timed_out_not_graded():
    from grader.instructor.runner import Outcome, _graded
    from grader.spec import NOT_RUN

    passed = {"status": "passed", "message": ""}
    assert _graded({"tests": [passed]}, 1.0)["outcome"] == Outcome.GRADED
    not_run = {"status": "timed_out", "message": f"{NOT_RUN}: the grading's time ran out before it"}
    result = _graded({"tests": [passed, not_run]}, 1.0)
    assert result["outcome"] == Outcome.TIMED_OUT and "--time-limit ran out" in result["message"]


def test_a_time_limit_too_short_for_the_reference_is_refused_with_the_figure_it_needs(tmp_path, capsys):
    """grade, grade-all and the Gradescope bundle: refused before any grading, naming the least limit."""
    from grader.cli import main
    from grader.instructor.gradescope import minimum_time_limit, minimum_timeout, time_limit

    assert minimum_time_limit(1.0) == 90 and minimum_time_limit(2.0) == 180
    assert time_limit(minimum_timeout(2.0)) >= minimum_time_limit(2.0)
    (tmp_path / "class" / "ada").mkdir(parents=True)
    for argv in (["grade", "examples/submissions/correct", "--time-limit", "30"],
                 ["grade-all", str(tmp_path / "class"), "--out", str(tmp_path / "out"), "--time-limit", "60"],
                 ["grade", "examples/submissions/correct", "--time-limit", "100", "--timeout-scale", "2"]):
        assert main(argv) == 2
        assert "needs at --timeout-scale" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    bundle = ["autograder", "--out", str(tmp_path / "a.zip"), "--timeout", "120", "--timeout-scale", "2"]
    assert main(bundle) == 2
    assert "Use --timeout 225 or more" in capsys.readouterr().err and not (tmp_path / "a.zip").exists()
