"""The judge end to end: the reference scores full marks, stubs score 0, results are stable
and fail closed, and the JSON follows SPEC.md."""
import json
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.cli import main
from grader.judge import ERROR, NOT_ATTEMPTED, PASSED, TIMED_OUT, GuardedStudent, judge, run_case
from grader.sandbox.client import Sandbox
from grader.scoring import scorecard
from grader.suites import COMPONENTS, Case, all_cases
from grader.suites.checks import expect

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference_card():
    return scorecard(judge(ROOT / "solutions"))


def test_points_total_100_over_every_component():
    cases = all_cases()
    assert sum(c.points for c in cases) == 100
    assert {c.component for c in cases} == set(COMPONENTS)
    assert len({c.name for c in cases}) == len(cases), "test names must be unique"


def test_every_component_has_public_and_hidden_tests():
    for component in COMPONENTS:
        kinds = {c.public for c in all_cases(components=(component,))}
        assert kinds == {True, False}, component


def test_the_reference_gets_full_marks(reference_card):
    failed = [f"{r.name}: {r.status} {r.message}" for r in reference_card.tests if r.status != PASSED]
    assert not failed
    assert reference_card.score == reference_card.max_score == 100


def test_stubs_score_zero_and_read_not_attempted():
    card = scorecard(judge(ROOT / "exercises"))
    assert card.score == 0
    assert {r.status for r in card.tests} == {NOT_ATTEMPTED}


def test_public_tests_run_without_the_reference():
    card = scorecard(judge(ROOT / "solutions", public_only=True))
    assert card.score == card.max_score and all(r.status == PASSED for r in card.tests)


def test_the_same_submission_gets_the_same_results(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for source in (ROOT / "solutions").glob("*.py"):
        text = source.read_text().replace("/ math.sqrt(q.size(-1))", "")
        (broken / source.name).write_text(text)
    runs = [judge(broken, components=("attention", "quiz")) for _ in range(2)]
    assert [vars(r) for r in runs[0]] == [vars(r) for r in runs[1]]
    assert any(r.status != PASSED for r in runs[0])


def test_a_bug_in_the_grader_fails_closed(tmp_path):
    def broken_case(student):
        raise KeyError("grader bug")

    case = Case("broken", "quiz", 1.0, True, 5.0, broken_case, "a broken test")
    sandbox = Sandbox(ROOT / "solutions", tmp_path)
    try:
        result = run_case(case, GuardedStudent(sandbox))
    finally:
        sandbox.close()
    assert result.status == ERROR and result.score == 0


def test_a_spent_budget_scores_the_rest_zero():
    results = judge(ROOT / "solutions", components=("attention",), budget=0)
    assert results and all(r.status == TIMED_OUT and r.score == 0 for r in results)


def test_cli_writes_the_spec_json(tmp_path, capsys):
    out = tmp_path / "card.json"
    assert main(["grade", str(ROOT / "solutions"), "--only", "quiz", "--json", str(out)]) == 0
    card = json.loads(out.read_text())
    assert set(card) == {"score", "max_score", "components", "tests"}
    assert set(card["components"]) == {"quiz"}
    assert set(card["components"]["quiz"]) == {"score", "max_score"}
    for test in card["tests"]:
        assert set(test) == {"name", "component", "score", "max_score", "status", "message"}
    assert "quiz" in capsys.readouterr().out


def test_cli_exits_nonzero_only_when_it_cannot_grade(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "missing")]) == 2
    assert "cannot read the submission" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["grade", str(empty)]) == 2


@given(n=st.integers(0, 1000))
def _slow_failing_case(student, n):
    student.call("torch.manual_seed", n)
    time.sleep(0.3)
    expect(n < 1, f"n={n} is too big")


def test_shrinking_out_of_time_reports_the_first_failure(tmp_path):
    case = Case("slow", "quiz", 1.0, True, 1.0, _slow_failing_case, "a slow test")
    sandbox = Sandbox(ROOT / "solutions", tmp_path)
    try:
        started = time.monotonic()
        result = run_case(case, GuardedStudent(sandbox))
    finally:
        sandbox.close()
    assert result.status == "failed" and "is too big" in result.message
    assert time.monotonic() - started < 5
