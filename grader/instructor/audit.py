"""`grader audit`: the mutation score of the test suite. Every bug of a corpus
(examples/submissions/bugs.py, or an instructor's file in its format: BUGS, each with a `name` and
a `component`, and `materialize(bug, folder)`) is graded on its own component by `grader grade`,
with grade-all's runner. A bug is caught by the public tests when a public test of its component
fails, by the hidden tests when a hidden one does, and survives when none does: an instructor who
edits a test sees what it no longer catches.
"""
import sys
import tempfile
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..grading import GradeOptions
from ..spec import COMPONENTS, Status, Visibility
from .corpus import load_bugs
from .runner import Job, Outcome, grade_jobs, payload


@dataclass(frozen=True)
class Catch:
    """What the tests made of one bug."""

    bug: str
    component: str
    status: Outcome
    public: bool = False
    hidden: bool = False
    message: str = ""

    @property
    def caught(self) -> bool:
        return self.public or self.hidden


def _catch(bug, result: dict, visibility: dict[tuple[str, str], Visibility]) -> Catch:
    status = Outcome(result["outcome"])
    if status is not Outcome.GRADED:
        return Catch(bug.name, bug.component, status, message=result["message"])
    failed = {visibility[test["component"], test["name"]] for test in result["card"]["tests"]
              if test["status"] != Status.PASSED}
    return Catch(bug.name, bug.component, status, Visibility.PUBLIC in failed, Visibility.HIDDEN in failed)


def audit(corpus: Path, names: Sequence[str], workers: int, scheduler: str | None = None,
          security: object = None) -> list[Catch]:
    """Grade the corpus's bugs (those named, or all) and say which tests catch each."""
    from tqdm import tqdm

    from ..suites import all_cases

    module = load_bugs(Path(corpus))
    unknown = sorted(set(names) - {bug.name for bug in module.BUGS})
    if unknown:
        raise ValueError(f"no bug named {', '.join(unknown)} in {corpus}")
    bugs = [bug for bug in module.BUGS if not names or bug.name in names]
    with tempfile.TemporaryDirectory(prefix="audit-") as scratch:
        jobs = [Job(*payload(module.materialize(bug, scratch)), GradeOptions(components=(bug.component,)))
                for bug in bugs]
    results: list[dict] = [{}] * len(jobs)
    with tqdm(total=len(jobs), desc="grading the bugs", unit="bug", file=sys.stderr) as bar, \
            closing(grade_jobs(jobs, workers, scheduler, security)) as graded:
        for index, result in graded:
            results[index] = result
            bar.update()
    visibility = {(case.component, case.name): case.visibility for case in all_cases()}
    return [_catch(bug, result, visibility) for bug, result in zip(bugs, results, strict=True)]


def _names(catches: list[Catch]) -> str:
    return ", ".join(f"{c.bug} ({c.component})" for c in catches) or "none"


def table(catches: Sequence[Catch]) -> str:
    """Per component: bugs, how many the public and the hidden tests catch, which survive."""
    graded = [c for c in catches if c.status is Outcome.GRADED]
    lines = [f"{'component':<12} {'bugs':>4} {'public':>6} {'hidden':>6} {'caught':>6}  survivors"]
    for component in COMPONENTS:
        mine = [c for c in graded if c.component == component]
        if mine:
            survivors = ", ".join(c.bug for c in mine if not c.caught) or "-"
            lines.append(f"{component:<12} {len(mine):>4} {sum(c.public for c in mine):>6} "
                         f"{sum(c.hidden for c in mine):>6} {sum(c.caught for c in mine):>6}  {survivors}")
    if graded:
        caught, public = sum(c.caught for c in graded), sum(c.public for c in graded)
        hidden = sum(c.hidden for c in graded)
        lines.append(f"{'all':<12} {len(graded):>4} {public:>6} {hidden:>6} {caught:>6}")
        lines += ["", f"Mutation score: {caught / len(graded):.0%} of {len(graded)} bugs caught "
                      f"({public / len(graded):.0%} by the public tests alone)."]
    lines.append("Caught by the hidden tests only (`grader check` passes them): "
                 + _names([c for c in graded if c.hidden and not c.public]))
    lines.append("Caught by the public tests only (no hidden test fails): "
                 + _names([c for c in graded if c.public and not c.hidden]))
    lines.append("Survivors (no test fails): " + _names([c for c in graded if not c.caught]))
    not_graded = [c for c in catches if c.status is not Outcome.GRADED]
    if not_graded:
        lines.append("Not graded: " + "; ".join(f"{c.bug} ({c.status}: {c.message})" for c in not_graded))
    return "\n".join(lines)
