"""The docs' components and points are generated from the one source (`grader generate`, whose --check
this runs, so CI does): the component list of grader/spec.py and each test's `@suite.case(points)`."""
import pytest

from grader.instructor.generate import GenerateError, Tally, check_total, generate, handout, tally
from grader.spec import COMPONENT_POINTS, COMPONENTS
from grader.suites import all_cases
from helpers import ROOT

LAB = (ROOT / "docs" / "lab.md").read_text()


def test_every_generated_copy_is_up_to_date():
    assert generate(ROOT, check=True) == [], "run `grader generate` (docs/authoring.md)"


def test_a_components_points_are_its_tests_points():
    found = tally()
    assert list(found.points) == list(COMPONENTS)
    assert found.points == COMPONENT_POINTS == {
        name: sum(c.points for c in all_cases(components=(name,))) for name in COMPONENTS}


def test_a_fixed_total_names_the_component_that_is_off():
    found = Tally({"a": 10.0, "b": 5.0, "c": 2.0}, {"a": 10.0, "b": 5.0, "c": 2.0})
    check_total(found, {}, fixed=None)
    check_total(found, {}, fixed=34)
    with pytest.raises(GenerateError, match=r"sum to 34, not FIXED_TOTAL = 30 .*: c 4 \(new\);"):
        check_total(found, {"a": 20, "b": 10}, fixed=30)
    with pytest.raises(GenerateError, match=r"b 10 \(was 6\)"):
        check_total(found, {"a": 20, "b": 6, "c": 4}, fixed=30)


PARTS = """| # | component | file | public | hidden | total | builds on |
|---|---|---|---:|---:|---:|---|
| 1 | b | `b.py` | 1 | 1 | 2 | a |
| | **total** | | **1** | **1** | **2** | |

public tests: 1 of 2 points.

## Part 1 — Bee (`b.py`, 2 points: 1 public + 1 hidden)

Needs Part 2 (a).

## Part 2 — Ay (`a.py`, 9 points: 9 public + 0 hidden)
"""


def test_the_handout_is_renumbered_and_its_points_rewritten():
    found = Tally({"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 0.5})
    with pytest.raises(GenerateError, match="parts are \\['b', 'a'\\]"):
        handout(PARTS, found)
    text = handout(PARTS, Tally({"b": 2.0, "a": 1.0}, {"b": 0.5, "a": 3.0}))
    assert "| 1 | b | `b.py` | 2 | 0.5 | 2.5 | a |\n| 2 | a | `a.py` | 1 | 3 | 4 | — |\n" in text
    assert "| | **total** | | **3** | **3.5** | **6.5** | |" in text
    assert "## Part 2 — Ay (`a.py`, 4 points: 1 public + 3 hidden)" in text
    assert "Needs Part 2 (a)." in text and "public tests: 3 of 6.5 points" in text
    with pytest.raises(GenerateError, match="write a cross-reference as 'Part N \\(component\\)'"):
        handout(PARTS + "\nSee Part 1.\n", Tally({"b": 2.0, "a": 1.0}, {"b": 0.5, "a": 3.0}))


def test_each_quiz_question_is_worth_what_its_test_is():
    worth = {case.points for case in all_cases(components=("quiz",)) if not case.public}
    assert len(worth) == 1, "the handout says every question is worth the same"
    assert f"Each question is worth {worth.pop():g} points." in LAB
