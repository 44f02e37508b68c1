"""From case results to a scorecard: per-component subtotals and 'fix X first' notes."""
import re
from dataclasses import dataclass, field

from .results import Result
from .spec import COMPONENTS, DEPENDS, Status


@dataclass
class Scorecard:
    score: float
    max_score: float
    components: dict[str, dict[str, float]]
    tests: list[Result] = field(default_factory=list)
    sandbox: dict | None = None
    """The sandbox the tests ran in: its mode, what it isolates, one line for a student, and the
    limits this platform refused (Sandbox.isolation())."""

    def to_json(self) -> dict:
        """The docs/spec.md "Grader interface" schema, and the sandbox it ran in."""
        return {
            "score": self.score,
            "max_score": self.max_score,
            "components": self.components,
            "tests": [r.to_json() for r in self.tests],
            "sandbox": self.sandbox,
        }


_WAITING = re.compile(r"^waiting for (\S+) \(still a stub\)")


def waiting_for(function: str) -> str:
    """The message of a test that stopped at another component's stub (function: "positional.apply_rope")."""
    return f"waiting for {function} (still a stub)"


def waited_for(result: Result) -> str | None:
    """The other component's stub a not-attempted test stopped at, if that is why it did."""
    found = _WAITING.match(result.message)
    return found.group(1) if found and result.status is Status.NOT_ATTEMPTED else None


def runs(component: str) -> set[str]:
    """Every component whose code the tests of `component` run, directly or through another."""
    found, todo = set(), list(DEPENDS.get(component, ()))
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(DEPENDS.get(name, ()))
    return found


def _dependency_note(result: Result, failing: set[str]) -> str:
    component = result.component
    if any(f"{name}.py" in result.message for name in runs(component)):
        return ""  # the message names the file at fault already (one that cannot be imported)
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
        else Result(**{**vars(r), "message": r.message + _dependency_note(r, failing)})
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
