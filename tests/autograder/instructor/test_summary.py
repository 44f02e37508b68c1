"""summary.md for the instructor: the reteach table counts a cause once per student (a file that did not
import is one row, not one per test), its headings say what the figures are, the mean says whom it counts;
and a broken zip is called a broken zip."""
from pathlib import Path

import pytest

from grader.instructor.gradebook import ONE_CAUSE, Row, failure_rates, summary
from grader.instructor.runner import Outcome
from grader.spec import IMPORTED_BY
from grader.submission import SubmissionError, unpack

IMPORT_ERROR = "attention.py: ImportError at line 3: cannot import name 'rope'"


def card(score: float, failing: dict[str, str], tests: int = 25) -> dict:
    """A scorecard of `tests` attention tests of 1 point, those in `failing` failed with their message."""
    names = [f"t{i}" for i in range(tests)]
    totals = {"score": score, "max_score": float(tests)}
    return {**totals, "components": {"attention": totals},
            "tests": [{"component": "attention", "name": name, "max_score": 1.0,
                       "status": "failed" if name in failing else "passed", "message": failing.get(name, "")}
                      for name in names]}


def test_a_file_that_did_not_import_is_one_cause_not_one_row_per_test():
    broken = card(0.0, {f"t{i}": IMPORT_ERROR for i in range(25)})
    wrong = card(23.0, {"t0": "t0: the scores are not divided by sqrt(d_k)", "t1": "t1: NaN"})
    rates = {rate["test"]: rate for rate in failure_rates([broken, wrong]) if rate["failed"]}
    assert set(rates) == {ONE_CAUSE, "t0", "t1"}, rates  # not 25 rows for one ImportError
    cause = rates[ONE_CAUSE]
    assert (cause["failed"], cause["graded"], cause["points"]) == (1, 2, 25.0)
    assert cause["messages"].most_common(1)[0][0] == IMPORT_ERROR
    assert (rates["t0"]["failed"], rates["t0"]["graded"]) == (1, 2)  # the broken card: in its cause's row


def test_a_file_that_did_not_import_is_one_cause_in_every_component_that_imports_it():
    """positional.py broken: its own tests and those of each component whose file imports it say its
    problem (spec.IMPORTED_BY); the student counts once, in positional's row, not once a component."""
    problem = "positional.py: SyntaxError at line 3: invalid syntax"
    tests = [("positional", "p0", problem), ("positional", "p1", problem),
             *((component, f"{component[0]}{i}", IMPORTED_BY.format(problem=problem, module=component))
               for component in ("attention", "block", "model") for i in range(3))]
    broken = {"score": 0.0, "max_score": 11.0, "components": {},
              "tests": [{"component": component, "name": name, "max_score": 1.0, "status": "failed",
                         "message": message} for component, name, message in tests]}
    rates = [rate for rate in failure_rates([broken]) if rate["failed"]]
    assert [(rate["component"], rate["test"], rate["points"]) for rate in rates] == [
        ("positional", ONE_CAUSE, 11.0)]
    assert rates[0]["messages"].most_common(1)[0][0] == problem


def test_the_summary_says_what_its_figures_are_and_whom_the_mean_counts():
    rows = [Row("ann", Outcome.GRADED, card=card(25.0, {})),
            Row("bob", Outcome.GRADED, card=card(15.0, {f"t{i}": IMPORT_ERROR for i in range(10)})),
            Row("cat", Outcome.EMPTY, "cat/ holds no file"),
            Row("dan", Outcome.TIMED_OUT, "1 test stalled", card=card(2.0, {"t3": "stalled"}))]
    text = summary(rows, "1.0")
    assert ("Out of 25, over the 2 graded submissions: mean 20.0, median 20, lowest 15, highest 25. Not in "
            "these figures: 1 empty or unreadable, 0 in gradebook.csv (the mean with them: 13.3). Nor the 1 "
            "whose grading did not end") in text
    assert "## Tests failed (what to reteach): the share of the graded students who failed each test" in text
    assert f"| 33% | 1/3 | attention | {ONE_CAUSE} | up to 10 | attention.py: ImportError" in text
    assert text.count("| attention | t") == 1  # dan's stalled test; bob's ten failures are one cause


def test_a_broken_zip_is_called_a_broken_zip(tmp_path: Path):
    for name, content in [("cut.zip", b"PK\x03\x04 cut short"), ("renamed.bin", b"PK\x03\x04 cut short"),
                          ("empty.zip", b"")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(SubmissionError, match="is a broken zip file"):
            unpack(tmp_path / name, tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SubmissionError, match="neither a directory, a zip file nor a notebook"):
        unpack(tmp_path / "notes.txt", tmp_path)
