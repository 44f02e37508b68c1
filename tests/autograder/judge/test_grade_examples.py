"""The grader on the example submissions: the correct one gets 100, each bug loses points in
its own component with a message that points at it, crashes cost only their own component."""
import pytest

from grader.judge import judge
from grader.scoring import scorecard
from grader.spec import COMPONENT_POINTS, Status
from grader.suites import all_cases
from helpers import EXAMPLES, load_bugs

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
bugs = load_bugs()
HIDDEN_ONLY = {
    "quiz_wrong_answer": "the public quiz test checks the format only: checking a letter would reveal it",
}
"""The bugs that only the hidden tests catch, and why; every other bug loses public points too."""
SMOKE = {"no_causal_mask", "post_norm_as_pre_norm", "syntax_error"}
"""The bugs the default run grades (one of attention's, one of the block's, a crash); -m 'not heavy': all."""


def _params(crash: bool) -> list:
    return [pytest.param(bug, id=bug.name, marks=[pytest.mark.smoke] if bug.name in SMOKE else [])
            for bug in bugs.BUGS if bug.crash == crash]


@pytest.mark.smoke
def test_hidden_only_bugs_exist():
    assert SMOKE <= set(bugs.BY_NAME)
    assert all(name in bugs.BY_NAME and not bugs.BY_NAME[name].crash for name in HIDDEN_ONLY)


@pytest.mark.smoke  # every hidden test of every component, once per run
def test_the_correct_alternative_gets_full_marks():
    card = scorecard(judge(EXAMPLES / "correct"))
    failed = [f"{r.name}: {r.message}" for r in card.tests if r.status is not Status.PASSED]
    assert not failed and card.score == card.max_score == sum(COMPONENT_POINTS.values())


@pytest.mark.parametrize("bug", _params(crash=False))
def test_each_bug_loses_points_in_its_component_and_says_why(bug, tmp_path):
    submission = bugs.materialize(bug, tmp_path)
    results = judge(submission, components=(bug.component,))
    lost = [r for r in results if r.status is not Status.PASSED]
    assert lost, f"{bug.name}: no {bug.component} test failed ({bug.description})"
    public = {r.name for r in lost} & {c.name for c in all_cases(True, (bug.component,))}
    assert bool(public) != (bug.name in HIDDEN_ONLY), (
        f"{bug.name}: public tests lost {sorted(public) or 'none'}; HIDDEN_ONLY must list exactly the bugs "
        "that only hidden tests catch")
    messages = " ".join(r.message.lower() for r in lost)
    assert any(word in messages for word in bug.keywords), (
        f"{bug.name}: no message mentions {bug.keywords}:\n" + "\n".join(r.message for r in lost))


@pytest.mark.parametrize("bug", _params(crash=True))
def test_a_crash_costs_only_its_own_component(bug, tmp_path):
    submission = bugs.materialize(bug, tmp_path)
    others = tuple(c for c in ("quiz", "positional", "feedforward") if c != bug.component)[:2]
    card = scorecard(judge(submission, components=(bug.component, *others), timeout_scale=0.5))
    for name in others:
        assert card.components[name]["score"] == card.components[name]["max_score"], name
    if bug.name != "print_flood":  # its functions still return the right values
        assert card.components[bug.component]["score"] < card.components[bug.component]["max_score"]
