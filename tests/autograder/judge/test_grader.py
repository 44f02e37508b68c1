"""The judge end to end: the reference scores full marks, stubs score 0, results are stable
and fail closed, a failure names the input of the failing call, and the JSON follows docs/spec.md."""
import json
import re
import resource

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.cli import main
from grader.judge import judge
from grader.sandbox.clocks import Allowance
from grader.scoring import scorecard
from grader.spec import COMPONENT_POINTS, COMPONENTS, Status
from grader.suites import all_cases
from grader.suites.checks import expect
from helpers import ROOT, as_case, run_on_solutions


@pytest.fixture(scope="module")
def reference_card():
    return scorecard(judge(ROOT / "solutions"))


def test_the_points_are_the_sum_of_every_components_tests():
    cases = all_cases()
    assert sum(c.points for c in cases) == sum(COMPONENT_POINTS.values())
    for component in COMPONENTS:
        points = sum(c.points for c in cases if c.component == component)
        assert points == COMPONENT_POINTS[component], component
    assert len({c.name for c in cases}) == len(cases), "test names must be unique"


def test_every_component_has_public_and_hidden_tests():
    for component in COMPONENTS:
        kinds = {c.public for c in all_cases(components=(component,))}
        assert kinds == {True, False}, component


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_reference_gets_full_marks(reference_card):
    failed = [f"{r.name}: {r.status} {r.message}" for r in reference_card.tests
              if r.status is not Status.PASSED]
    assert not failed
    assert reference_card.score == reference_card.max_score == sum(COMPONENT_POINTS.values())


@pytest.mark.slow
@pytest.mark.sandbox
def test_stubs_score_zero_and_read_not_attempted():
    card = scorecard(judge(ROOT / "exercises"))
    assert card.score == 0
    assert {r.status for r in card.tests} == {Status.NOT_ATTEMPTED}


@pytest.mark.slow
@pytest.mark.sandbox
def test_public_tests_run_without_the_reference():
    card = scorecard(judge(ROOT / "solutions", public_only=True))
    assert card.score == card.max_score and all(r.status is Status.PASSED for r in card.tests)


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_same_submission_gets_the_same_results(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for source in (ROOT / "solutions").glob("*.py"):
        text = source.read_text().replace("/ math.sqrt(q.size(-1))", "")
        (broken / source.name).write_text(text)
    runs = [judge(broken, components=("attention", "quiz")) for _ in range(2)]
    assert [vars(r) for r in runs[0]] == [vars(r) for r in runs[1]]
    assert any(r.status is not Status.PASSED for r in runs[0])


@pytest.mark.sandbox
def test_a_bug_in_the_grader_fails_closed(tmp_path):
    def broken_case(student):
        """a broken test"""
        raise KeyError("grader bug")

    result = run_on_solutions(as_case(broken_case, timeout=5.0), tmp_path)
    assert result.status is Status.ERROR and result.score == 0
    assert "KeyError" in result.message


@pytest.mark.sandbox
def test_a_spent_budget_scores_the_rest_zero():
    results = judge(ROOT / "solutions", components=("attention",), budget=0)
    assert results and all(r.status is Status.TIMED_OUT and r.score == 0 for r in results)


@pytest.mark.sandbox
def test_the_judge_gives_back_torchs_thread_count():
    """judge() runs on one intra-op thread and restores the caller's count, also when it raises."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        judge(ROOT / "solutions", components=("quiz",), public_only=True)
        assert torch.get_num_threads() == 3

        def interrupt(result):
            raise RuntimeError("stop")

        with pytest.raises(RuntimeError, match="stop"):
            judge(ROOT / "solutions", components=("quiz",), public_only=True, on_result=interrupt)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.sandbox
def test_a_stub_ends_its_case_at_the_first_call(tmp_path):
    """No shrinking, no replays: a NotImplementedError cannot become a pass. The stub is attention's, the
    case is quiz's: the message names the function the case waits for."""
    calls = []

    @given(n=st.integers(0, 50))
    def reaches_a_stub(student, n):
        """a test that reaches a stub"""
        calls.append(n)
        student.call("attention.causal_mask", n)

    result = run_on_solutions(as_case(reaches_a_stub), tmp_path, submission="exercises")
    assert result.status is Status.NOT_ATTEMPTED and result.score == 0
    assert result.message == "waiting for attention.causal_mask (still a stub)"
    assert len(calls) == 1


@pytest.mark.sandbox
def test_check_says_how_much_of_the_grade_it_covers(capsys):
    assert main(["check", str(ROOT / "solutions"), "--only", "quiz"]) == 0
    public = sum(case.points for case in all_cases(public_only=True, components=("quiz",)))
    grade = COMPONENT_POINTS["quiz"]  # the share of the components that ran
    assert (f"public tests: {public:g} of {grade:g} points; hidden tests run when your work is graded"
            in capsys.readouterr().out.splitlines())


@pytest.mark.sandbox
def test_cli_writes_the_spec_json(tmp_path, capsys):
    """...and leaves the caller's address-space limit as it found it (the judge caps its own only
    while it grades: a kernel or a test run that grades in-process goes on with its own)."""
    out = tmp_path / "card.json"
    limit = resource.getrlimit(resource.RLIMIT_AS)
    assert main(["grade", str(ROOT / "solutions"), "--only", "quiz", "--json", str(out)]) == 0
    assert resource.getrlimit(resource.RLIMIT_AS) == limit
    card = json.loads(out.read_text())
    assert set(card) == {"score", "max_score", "components", "tests", "sandbox"}
    assert card["sandbox"]["mode"] in ("root", "userns", "setuid", "plain") and card["sandbox"]["isolates"]
    assert set(card["components"]) == {"quiz"}
    assert set(card["components"]["quiz"]) == {"score", "max_score"}
    for test in card["tests"]:
        # The contract's fields, and the visibility we add (docs/grading.md, where SPEC.md is silent)
        assert set(test) == {"name", "component", "score", "max_score", "status", "message", "visibility"}
        assert test["status"] in {status.value for status in Status}
    assert "quiz" in capsys.readouterr().out


def test_cli_exits_nonzero_only_when_it_cannot_grade(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "missing")]) == 2
    assert "cannot read the submission" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["grade", str(empty)]) == 2


def _input(message: str) -> str:
    found = re.search(r"\[input: ([^\]]*)\]$", message)
    assert found, f"no [input: ...] at the end of {message!r}"
    return found.group(1)


@given(T=st.integers(1, 50), dtype=st.sampled_from([torch.float32, torch.float64]))
def _fails_from_three_in_float64(student, T, dtype):
    """a property that fails for T >= 3 in float64"""
    student.call("torch.manual_seed", T)  # a real call through the sandbox
    expect(T < 3 or dtype is torch.float32, f"T={T}, {dtype} is too long")


@given(T=st.integers(1, 50))
def _student_raises_from_three(student, T):
    """the student's code raises for T >= 3"""
    student.call("attention.causal_mask", 2 - T)  # a negative size from T = 3 on


@pytest.mark.sandbox
@pytest.mark.parametrize("fn, said, shown", [
    (_fails_from_three_in_float64, "T=3, torch.float64 is too long", "T=3, dtype=torch.float64"),
    (_student_raises_from_three, "your code raised RuntimeError", "T=3"),
], ids=["failed", "student_raised"])
def test_a_failure_names_the_input_of_the_failing_call(fn, said, shown, tmp_path):
    """The shrunk failing call's own drawn arguments, nothing else (hypothesis's notes are not read):
    the values in the failure's text (which the failing call used) are those in [input: ...]."""
    result = run_on_solutions(as_case(fn), tmp_path)
    assert result.status is Status.FAILED and result.score == 0
    assert said in result.message
    assert _input(result.message) == shown


@pytest.mark.sandbox
def test_shrinking_out_of_time_reports_the_first_failure(tmp_path):
    """The limit passes while hypothesis shrinks: the first failure is reported, with its input, and the
    case stops there. (The allowance is spent at once, not waited for: no wall-clock assertion that load
    can break.)"""
    calls = []

    @given(n=st.integers(0, 1000))
    def slow_failing_case(student, n):
        """a slow test"""
        if any(not ok for _, ok in calls):  # a failure was seen: now hypothesis shrinks, out of time
            student.allowance = Allowance(cpu=0.0, waited=0.0, seconds=0.0)
        student.call("torch.manual_seed", n)
        calls.append((n, n < 1))
        expect(n < 1, f"n={n} is too big")

    result = run_on_solutions(as_case(slow_failing_case), tmp_path)
    first_failure = next(n for n, ok in calls if not ok)
    assert result.status is Status.FAILED and result.score == 0
    assert f"n={first_failure} is too big" in result.message
    assert _input(result.message) == f"n={first_failure}"
    assert calls[-1] == (first_failure, False), "no student call ran after the time ran out"


def test_every_status_has_a_progress_mark_of_its_own():
    """The marks `grader check` prints as tests end tell the statuses apart (a stub is not an F)."""
    from grader.options import PROGRESS_MARKS

    assert set(PROGRESS_MARKS) == set(Status)
    assert len(set(PROGRESS_MARKS.values())) == len(Status)
    assert PROGRESS_MARKS[Status.NOT_ATTEMPTED] != PROGRESS_MARKS[Status.FAILED]
