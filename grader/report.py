"""Reporters: the terminal scorecard and the JSON file."""
import json
from pathlib import Path

from .scoring import Scorecard
from .spec import Status


def _points(x: float) -> str:
    return f"{x:g}"


def terminal(card: Scorecard, title: str) -> str:
    """A table per component, the total, then every test that did not pass and why."""
    lines = [title, "", f"  {'component':<12} {'score':>9}  {'tests passed':>12}  status"]
    for name, totals in card.components.items():
        mine = [r for r in card.tests if r.component == name]
        passed = sum(r.status is Status.PASSED for r in mine)
        if all(r.status is Status.NOT_ATTEMPTED for r in mine):
            status = "not attempted"
        else:
            status = "ok" if passed == len(mine) else "needs work"
        score = f"{_points(totals['score'])}/{_points(totals['max_score'])}"
        lines.append(f"  {name:<12} {score:>9}  {passed:>5}/{len(mine):<6}  {status}")
    lines.append(f"  {'total':<12} {_points(card.score) + '/' + _points(card.max_score):>9}")
    problems = [r for r in card.tests if r.status is not Status.PASSED]
    attempted = [r for r in problems if r.status is not Status.NOT_ATTEMPTED]
    if attempted:
        lines += ["", "What to look at:"]
        for r in attempted:
            lines.append(f"  [{r.component}] {r.name} ({r.status.value}, 0/{_points(r.max_score)}): "
                         f"{r.message}")
    skipped = sorted({r.component for r in problems if r.status is Status.NOT_ATTEMPTED})
    if skipped:
        lines += ["", "Not attempted yet (still raising NotImplementedError): " + ", ".join(skipped)]
    return "\n".join(lines)


def write_json(card: Scorecard, path: Path) -> None:
    Path(path).write_text(json.dumps(card.to_json(), indent=2) + "\n")
