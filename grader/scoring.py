"""From case results to a scorecard: per-component subtotals and 'fix X first' notes."""
from dataclasses import dataclass, field

from .results import Result
from .spec import COMPONENTS, DEPENDS, Status


@dataclass
class Scorecard:
    score: float
    max_score: float
    components: dict[str, dict[str, float]]
    tests: list[Result] = field(default_factory=list)

    def to_json(self) -> dict:
        """The docs/spec.md "Grader interface" schema."""
        return {
            "score": self.score,
            "max_score": self.max_score,
            "components": self.components,
            "tests": [r.to_json() for r in self.tests],
        }


def _dependency_note(component: str, failing: set[str]) -> str:
    culprits = [d for d in DEPENDS.get(component, ()) if d in failing]
    if not culprits:
        return ""
    names = " and ".join(culprits)
    return f" (note: {component} runs your {names}, which fails tests too: fix {names} first)"


def scorecard(results: list[Result]) -> Scorecard:
    """Total the results; failed tests of a component whose dependencies fail say so."""
    failing = {r.component for r in results if r.status not in (Status.PASSED, Status.NOT_ATTEMPTED)}
    tests = [
        r if r.status is Status.PASSED
        else Result(**{**vars(r), "message": r.message + _dependency_note(r.component, failing)})
        for r in results
    ]
    components = {}
    for name in COMPONENTS:
        mine = [r for r in tests if r.component == name]
        if mine:
            components[name] = {"score": round(sum(r.score for r in mine), 4),
                                "max_score": round(sum(r.max_score for r in mine), 4)}
    return Scorecard(
        score=round(sum(c["score"] for c in components.values()), 4),
        max_score=round(sum(c["max_score"] for c in components.values()), 4),
        components=components,
        tests=tests,
    )
