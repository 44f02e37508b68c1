"""Reporters: the terminal scorecard and the JSON file."""
import json
from pathlib import Path

from .atomic import write_atomic
from .results import Result
from .scoring import Scorecard, waited_for, waiting_for
from .spec import COMPONENT_POINTS, Status


def _points(x: float) -> str:
    return f"{x:g}"


def _status(mine: list[Result]) -> str:
    """A component's status: ok, not attempted, waiting (for another component's stub) or needs work."""
    if all(r.status is Status.PASSED for r in mine):
        return "ok"
    if all(r.status is Status.PASSED or waited_for(r) for r in mine):
        return "waiting"
    return "not attempted" if all(r.status is Status.NOT_ATTEMPTED for r in mine) else "needs work"


def _problems(results: list[Result]) -> list[str]:
    """One line per failing test, or per message that several tests of a component share (a file
    that cannot be imported says so once)."""
    groups: dict[tuple[str, Status, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.component, r.status, r.message), []).append(r)
    lines = []
    for (component, status, message), group in groups.items():
        what = group[0].name if len(group) == 1 else f"{len(group)} tests"
        points = _points(sum(r.max_score for r in group))
        lines.append(f"  [{component}] {what} ({status.value}, 0/{points}): {message}")
    return lines


def terminal(card: Scorecard, title: str) -> str:
    """A table per component, the total, then every test that did not pass and why."""
    lines = [title, "", f"  {'component':<12} {'score':>9}  {'tests passed':>12}  status"]
    for name, totals in card.components.items():
        mine = [r for r in card.tests if r.component == name]
        passed = sum(r.status is Status.PASSED for r in mine)
        score = f"{_points(totals['score'])}/{_points(totals['max_score'])}"
        lines.append(f"  {name:<12} {score:>9}  {passed:>5}/{len(mine):<6}  {_status(mine)}")
    lines.append(f"  {'total':<12} {_points(card.score) + '/' + _points(card.max_score):>9}")
    problems = [r for r in card.tests if r.status is not Status.PASSED]
    attempted = [r for r in problems if r.status is not Status.NOT_ATTEMPTED]
    if attempted:
        lines += ["", "What to look at:", *_problems(attempted)]
    stubs = sorted({r.component for r in problems if r.status is Status.NOT_ATTEMPTED and not waited_for(r)})
    waiting = {(r.component, waited_for(r)) for r in problems if r.component not in stubs and waited_for(r)}
    if waiting:  # their own code is done, as far as their tests could tell
        lines += ["", "Waiting for another part (a test of it stops at a function still a stub):"]
        order = list(card.components)
        for component, function in sorted(waiting, key=lambda pair: (order.index(pair[0]), pair[1])):
            lines.append(f"  {component}: {waiting_for(function)}")
    if stubs:
        lines += ["", "Not attempted yet (still raising NotImplementedError): " + ", ".join(stubs)]
    return "\n".join(lines)


def public_share(card: Scorecard) -> str:
    """What a run of the public tests covers of the grade of the components it ran."""
    of = sum(COMPONENT_POINTS[name] for name in card.components)
    return (f"public tests: {_points(card.max_score)} of {_points(of)} points; "
            "hidden tests run when your work is graded")


def write_json(card: Scorecard, path: Path, extra: dict | None = None) -> None:
    """The scorecard as JSON (with `extra`'s fields at the top level), written whole or not at all."""
    write_atomic(Path(path), json.dumps(card.to_json() | (extra or {}), indent=2) + "\n")
