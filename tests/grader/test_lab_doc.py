"""The handout's points (its table, each part's heading and the public share) are the tests' own."""
import re
from collections import defaultdict

from grader.spec import COMPONENT_POINTS
from grader.suites import all_cases
from helpers import ROOT

LAB = (ROOT / "docs" / "lab.md").read_text()


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
