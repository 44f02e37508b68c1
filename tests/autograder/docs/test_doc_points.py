"""The docs' points (the handout's table, totals, part headings, per-question value and public share;
grading.md's list) are the tests' own, as `grader list-tests` lists them."""
import re
from collections import defaultdict

from grader.spec import COMPONENT_POINTS
from grader.suites import all_cases
from helpers import ROOT

LAB = (ROOT / "docs" / "lab.md").read_text()
GRADING = (ROOT / "docs" / "grading.md").read_text()


def _points() -> dict[str, tuple[float, float]]:
    points: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for case in all_cases():
        points[case.component][0 if case.public else 1] += case.points
    return {name: (public, hidden) for name, (public, hidden) in points.items()}


def test_the_points_table_and_part_headings_match_the_tests():
    for name, (public, hidden) in _points().items():
        total = COMPONENT_POINTS[name]
        row = rf"^\| \d \| {name} \| `{name}.py` \| {public:g} \| {hidden:g} \| {total:g} \|"
        assert re.search(row, LAB, flags=re.M), f"the table's {name} row: {public:g}, {hidden:g}"
        heading = rf"^## Part \d — .*\(`{name}.py`, {total:g} points: {public:g} public \+ {hidden:g} hidden"
        assert re.search(heading, LAB, flags=re.M), f"the heading of {name}'s part"


def test_the_public_share_is_the_tests_share():
    public = sum(p for p, _ in _points().values())
    assert f"public tests: {public:g} of 100 points" in LAB


def test_the_totals_row_is_the_tests_sum():
    public = sum(p for p, _ in _points().values())
    hidden = sum(h for _, h in _points().values())
    row = f"| | **total** | | **{public:g}** | **{hidden:g}** | **{sum(COMPONENT_POINTS.values()):g}** |"
    assert row in LAB


def test_each_quiz_question_is_worth_what_its_test_is():
    worth = {case.points for case in all_cases(components=("quiz",)) if not case.public}
    assert len(worth) == 1, "the handout says every question is worth the same"
    assert f"Each question is worth {worth.pop():g} points." in LAB


def test_grading_md_states_the_components_points():
    listed = ", ".join(f"{name} {points:g}" for name, points in COMPONENT_POINTS.items())
    text = " ".join(GRADING.split())
    total = sum(COMPONENT_POINTS.values())
    assert f"Points total {total:g} (`grader/spec.py`, COMPONENT_POINTS): {listed}." in text
