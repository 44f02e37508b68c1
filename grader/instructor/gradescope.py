"""Gradescope's results.json: a `grader grade --json` scorecard in Gradescope's format, and the grading
step of the autograder bundle (`grader autograder` builds the bundle: autograder.py).

The format is Gradescope's autograder specification
(https://gradescope-autograders.readthedocs.io/en/latest/specs/; grader/schemas/
gradescope_results.schema.json checks it). Each case is one Gradescope test: public cases are
always visible, hidden ones get the bundle's visibility (after_published by default), so that a
student sees their public tests at once and the rest when the instructor says so. The top-level
output (Markdown) sums up what the student may see now, and never more.

The bundle's run_autograder calls `python -m grader.instructor.gradescope ROOT [--only A,B]`, which grades
ROOT/submission with `grader grade` in a child process (the judge: the student's code runs in its
sandbox, never here), then writes ROOT/results/results.json once the judge and its workers are
gone, replacing whatever is there. A submission that cannot be read, or a grading that does not
finish, still gets a results.json: score 0 and a message that says why (fail closed).

Gradescope gives 0 and shows no test when its timeout (the bundle's `timeout`, 600 s by default)
passes: the judge gets that time less a reserve (time_limit) and does not start a test that could
not end within it (those say "not run (time limit)"); a judge still running at the timeout less
STOP_RESERVE is stopped, and results.json has the tests that had ended (`grader grade --progress`)
and the others, not run.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import write_atomic
from ..results import safe_text
from ..spec import COMPONENTS, NOT_RUN, UNSAFE_FLAG, Status, Visibility
from ..submission import MODULES, SubmissionError, unpack

if TYPE_CHECKING:
    from ..suites import Case

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
"""Gradescope's visibility values: never shown, after the due date, once published, always."""
DEFAULT_HIDDEN_VISIBILITY = "after_published"
SUBMISSION, RESULTS, SETTINGS = "submission", "results/results.json", "source/autograder.json"
"""Paths under the autograder root: Gradescope's, and the bundle's settings (autograder.py writes them)."""
_WHEN = {"after_due_date": "appear after the due date",
         "after_published": "appear when the grades are published", "hidden": "are not shown here"}
SAYS = {Status.PASSED: "passed", Status.FAILED: "failed", Status.NOT_ATTEMPTED: "not attempted",
         Status.TIMED_OUT: "timed out", Status.STALLED: "stalled (not a verdict: ask for a regrade)",
         Status.CRASHED: "crashed", Status.ERROR: "grader error"}
"""What each test status is called where a student reads it (results.json, feedback pages): every status."""
_UPLOAD = ", ".join(f"`{name}.py`" for name in MODULES)
DEFAULT_TIMEOUT = 600.0
"""Gradescope's default autograder timeout (10 minutes; 40 at most)."""
TIMEOUTS = (120.0, 2400.0)
"""The timeouts a bundle accepts: enough for the start and a few tests; Gradescope's maximum."""
STOP_RESERVE = 30.0
"""Seconds before the timeout at which a judge still running is stopped: STOP_GRACE for it to close
its sandbox, the rest to write results.json."""
STOP_GRACE = 10.0


@dataclass(frozen=True)
class ListedCase:
    """What results.json needs of a case, as the bundle lists them (autograder.json's "cases", written by
    `grader autograder`): run_autograder then imports neither the suites nor torch (the judge does)."""

    component: str
    name: str
    points: float
    visibility: Visibility
    doc: str

    @property
    def public(self) -> bool:
        return self.visibility is Visibility.PUBLIC


def catalogue(cases: Iterable["Case"]) -> list[dict]:
    """The cases as autograder.json lists them."""
    return [{"component": case.component, "name": case.name, "points": case.points,
             "visibility": case.visibility.value, "doc": case.doc} for case in cases]


def listed(settings: dict) -> list[ListedCase]:
    """The cases autograder.json lists."""
    return [ListedCase(**{**case, "visibility": Visibility(case["visibility"])})
            for case in settings["cases"]]


_INPUT = " [input: "
_NOTE = " (note: "


def withheld(message: str) -> str:
    """A hidden test's message without its drawn input (a note on another component stays): the
    judge writes the input as `[input: ...]`, whose seed and values the release's own strategies
    would rebuild. Whatever a student may see of a hidden test goes through here."""
    head, found, tail = message.partition(_INPUT)
    if not found:
        return message
    note = tail[tail.rfind(_NOTE):] if _NOTE in tail else ""
    return f"{head} [input withheld]{note}"


def time_limit(timeout: float) -> float:
    """The judge's time within Gradescope's `timeout`: less a reserve for what runs outside its
    clock (Gradescope's start, the judge's own imports, a worker restarting in its last test), and
    more than STOP_RESERVE, so that the judge normally ends before it is stopped."""
    return timeout - max(1.5 * STOP_RESERVE, 0.15 * timeout)


REFERENCE_SECONDS = 15.0
"""The reference's own full grading, in wall seconds at --timeout-scale 1, rounded up from the slowest
machine measured: 13.4 s on Gradescope's half CPU (docs/grading.md, "Gradescope"), 5.5 s on the 2-core
development machine (README, "Speed")."""
TIME_MARGIN = 2.0
"""How many times REFERENCE_SECONDS a time limit leaves for the tests before the longest one starts."""


def minimum_time_limit(timeout_scale: float = 1.0) -> float:
    """The shortest --time-limit that takes no points from correct work: the judge does not start a
    test whose CPU limit would end past the limit (judge.judge's `deadline`), so the reference must
    reach its longest test (60 s at scale 1) with that test's limit still ahead of it: TIME_MARGIN
    times its own grading, then that limit, both scaled."""
    from ..suites import all_cases  # torch: only the commands that grade ask

    return math.ceil(timeout_scale * (TIME_MARGIN * REFERENCE_SECONDS + max(c.timeout for c in all_cases())))


def minimum_timeout(timeout_scale: float = 1.0) -> float:
    """The shortest Gradescope timeout whose time_limit is minimum_time_limit (time_limit's inverse)."""
    needed = minimum_time_limit(timeout_scale)
    reserve = 1.5 * STOP_RESERVE
    return float(needed + reserve if 0.15 * (needed + reserve) <= reserve else math.ceil(needed / 0.85))


def time_limit_refused(time_limit: float | None, timeout_scale: float) -> str:
    """Why `time_limit` would take points from correct work ("" if it would not, or is not set)."""
    if time_limit is None:  # before the suites are loaded: a grading forks its template only before
        return ""  # it holds a hidden test (sandbox/template_client.forks_template)
    needed = minimum_time_limit(timeout_scale)
    if time_limit >= needed:
        return ""
    return (f"--time-limit {time_limit:g} is shorter than the reference's own grading needs at "
            f"--timeout-scale {timeout_scale:g}: at least {needed:g} s (its longest test's limit, and "
            f"{TIME_MARGIN:g} times its grading of {REFERENCE_SECONDS:g} s before it); a test with no time "
            "left would cost correct work its points")


def _points(x: float) -> str:
    return f"{x:g}"


def _table(tests: list[dict]) -> list[str]:
    """A Markdown table of these tests' results by component."""
    lines = ["| component | tests passed | points |", "|---|---:|---:|"]
    for name in COMPONENTS:
        mine = [t for t in tests if t["component"] == name]
        if mine:
            passed = sum(t["status"] == Status.PASSED for t in mine)
            score = _points(sum(t["score"] for t in mine)) + "/" + _points(sum(t["max_score"] for t in mine))
            lines.append(f"| {name} | {passed}/{len(mine)} | {score} |")
    return lines


def _summary(tests: list[dict], public: list[dict], hidden_visibility: str) -> str:
    """The top-level output: every result if hidden tests are visible, else the public ones only."""
    if hidden_visibility == "visible":
        total = _points(sum(t["score"] for t in tests)) + "/" + _points(sum(t["max_score"] for t in tests))
        return "\n".join([f"**Score: {total}**", "", *_table(tests)])
    score = _points(sum(t["score"] for t in public)) + "/" + _points(sum(t["max_score"] for t in public))
    hidden = _points(sum(t["max_score"] for t in tests) - sum(t["max_score"] for t in public))
    return "\n".join([f"**Public tests: {score} points.** The hidden tests ({hidden} points) "
                      f"{_WHEN[hidden_visibility]}.", "", *_table(public)])


def results(card: dict, cases: Iterable["Case | ListedCase"], *,
            hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY, execution_time: float = 0.0) -> dict:
    """Gradescope's results.json for a scorecard (Scorecard.to_json): one test per case.

    `cases` (suites.all_cases(), or the bundle's list) say which tests are public and what each checks;
    a test not among them counts as hidden. A test's status is "passed" or "failed"; the grader's own
    status (timed out, crashed, ...) opens its output, unless the message says it already.
    """
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"hidden_visibility={hidden_visibility!r}: choose from {', '.join(VISIBILITIES)}")
    known = {(case.component, case.name): case for case in cases}
    tests, public, counts = [], [], dict.fromkeys(COMPONENTS, 0)
    for test in card["tests"]:
        component, case = test["component"], known.get((test["component"], test["name"]))
        status, shown = Status(test["status"]), case is not None and case.public
        said = test["message"] if shown else withheld(test["message"])  # at any visibility: the input never
        said = said or (case.doc if case else test["name"])
        counts[component] += 1
        if shown:
            public.append(test)
        tests.append({
            "name": f"{component}: {test['name']}" + ("" if shown else " (hidden)"),
            "name_format": "text",
            "number": f"{COMPONENTS.index(component) + 1}.{counts[component]}",
            "score": test["score"],
            "max_score": test["max_score"],
            "status": "passed" if status is Status.PASSED else "failed",
            # text, never rendered: the message may quote the student's own output
            "output": said if said.startswith((SAYS[status], NOT_RUN)) else f"{SAYS[status]}: {said}",
            "output_format": "text",
            "tags": [component],
            "visibility": "visible" if shown else hidden_visibility,
        })
    return {"score": card["score"], "execution_time": round(execution_time),
            "output": _summary(card["tests"], public, hidden_visibility), "output_format": "md",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"sandbox": card.get("sandbox")}}


def _code_block(text: str) -> str:
    """`text` as a Markdown code block that no run of backticks inside it can close."""
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


def not_graded(reason: str, *, unreadable: bool, execution_time: float = 0.0) -> dict:
    """results.json for a submission that was not graded at all: score 0 and why.

    `unreadable`: the submission could not be read (the student can fix that: what to upload);
    otherwise the grading did not finish (the course staff see the details in the stdout).
    """
    reason = safe_text(reason)
    if unreadable:
        output = (f"**Nothing was graded: your submission could not be read.**\n\n{_code_block(reason)}\n\n"
                  f"Upload {_UPLOAD} (the files themselves, or a zip or notebook holding them) "
                  "and submit again.")
    else:
        output = (f"**Nothing was graded: the autograder stopped before it finished** ({reason}). The score "
                  "of 0 is not a grade of your work: tell your course staff, who can see what happened.")
    return {"score": 0.0, "execution_time": round(execution_time), "output": output, "output_format": "md",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": []}


def _grade(root: Path, only: str | None, start: float) -> dict:
    """Grade root's submission in a child `grader grade`; its results.json."""
    settings = json.loads((root / SETTINGS).read_text())
    with tempfile.TemporaryDirectory(prefix="gradescope-") as scratch:
        unpacked, card_file, ended = (Path(scratch, name) for name in ("submission", "scorecard.json",
                                                                         "progress.jsonl"))
        unpacked.mkdir()
        try:
            directory = unpack(root / SUBMISSION, unpacked)  # a lone uploaded zip or notebook too
        except SubmissionError as error:
            return not_graded(str(error), unreadable=True, execution_time=time.monotonic() - start)
        timeout = settings.get("timeout", DEFAULT_TIMEOUT)  # a bundle from before the setting: the default
        left = time_limit(timeout) - (time.monotonic() - start)
        # --bundle-time-limit: --time-limit, checked when the bundle was built (autograder.py): here it
        # is what is left of the timeout, a few seconds under, and must never refuse the student
        command = [sys.executable, "-m", "grader.cli", "grade", str(directory), "--json", str(card_file),
                   "--timeout-scale", str(settings["timeout_scale"]), "--bundle-time-limit", f"{left:.0f}",
                   "--progress", str(ended), *(["--only", only] if only else []),
                   *([UNSAFE_FLAG] if settings.get("unsafe_no_sandbox") else [])]
        code = _run(command, start + timeout - STOP_RESERVE)
        if code is None:
            card = _stopped(ended, only, timeout, listed(settings))
        elif code != 0 or not card_file.is_file():
            return not_graded(f"`grader grade` exited with code {code}", unreadable=False,
                              execution_time=time.monotonic() - start)
        else:
            card = json.loads(card_file.read_text())
    return results(card, listed(settings), hidden_visibility=settings["hidden_visibility"],
                   execution_time=time.monotonic() - start)


def _stopped(ended: Path, only: str | None, timeout: float, cases: Iterable["Case | ListedCase"]) -> dict:
    """The scorecard of a grading stopped at the timeout: the tests that had ended (`ended`, a JSON
    line each), then the others of the components graded, not run."""
    from ..grading import parse_components
    from ..results import Result
    from ..scoring import scorecard

    lines = ended.read_text().splitlines() if ended.is_file() else []
    done = {}
    for line in lines:
        test = json.loads(line)
        done[test["component"], test["name"]] = Result(**{**test, "status": Status(test["status"]),
                                                          "visibility": Visibility(test["visibility"])})
    why = f"the grading was stopped at the timeout of {timeout:g} s before this test"
    return scorecard([done.get((case.component, case.name)) or Result(
        case.name, case.component, 0.0, case.points, Status.TIMED_OUT, f"{NOT_RUN}: {case.doc}: {why}",
        case.visibility) for case in cases if case.component in parse_components(only)]).to_json()


def _run(command: list[str], deadline: float) -> int | None:
    """Run `grader grade` (its report goes to our stdout); its exit status, or None if it ran past
    `deadline` (then it is interrupted, so that it closes its sandbox, and killed if it lingers)."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return None


def write_results(payload: dict, path: Path) -> None:
    """Write results.json atomically, replacing whatever is at `path` (even a folder planted there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    write_atomic(path, json.dumps(payload, indent=2) + "\n")  # ASCII: every character of a message escaped


def main(argv: list[str] | None = None) -> int:
    """run_autograder's step: grade ROOT/submission, write ROOT/results/results.json; 0 once written."""
    parser = argparse.ArgumentParser(prog="python -m grader.instructor.gradescope",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the autograder root (Gradescope's /autograder)")
    parser.add_argument("--only", metavar="A,B", help="only these components (to try the bundle quickly)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        payload = _grade(args.root, args.only, start)
    except Exception as error:  # noqa: BLE001 - fail closed: a results.json that says so, never none
        traceback.print_exc()
        payload = not_graded(f"{type(error).__name__} in the autograder", unreadable=False,
                             execution_time=time.monotonic() - start)
    write_results(payload, args.root / RESULTS)
    print(f"wrote {args.root / RESULTS}: score {payload['score']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
