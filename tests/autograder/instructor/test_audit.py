"""grader audit: the table of which tests catch which bug, and a bug of the corpus graded for
real: quiz_wrong_answer, which only a hidden test catches (the public quiz test checks the format:
checking a letter would reveal it)."""
import subprocess
import sys

import pytest

from grader.instructor.audit import Catch, table
from grader.instructor.corpus import DEFAULT
from grader.instructor.runner import Outcome


def test_the_table_counts_catches_and_names_survivors():
    catches = [Catch("a", "attention", Outcome.GRADED, public=True, hidden=True),
               Catch("b", "attention", Outcome.GRADED, hidden=True),
               Catch("c", "attention", Outcome.GRADED),
               Catch("d", "quiz", Outcome.TIMED_OUT, message="grading ran past 900 s")]
    text = table(catches)
    assert "attention       3      1      2      2  c" in text
    assert "Mutation score: 67% of 3 bugs caught (33% by the public tests alone)." in text
    assert "Caught by the hidden tests only (`grader check` passes them): b (attention)" in text
    assert "Survivors (no test fails): c (attention)" in text
    assert "Not graded: d (timed_out: grading ran past 900 s)" in text


@pytest.mark.slow
@pytest.mark.sandbox
def test_audit_grades_the_bugs_it_is_given():
    command = [sys.executable, "-m", "grader.cli", "audit", "quiz_wrong_answer", "--corpus", str(DEFAULT)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "quiz            1      0      1      1  -" in run.stdout
    assert "hidden tests only (`grader check` passes them): quiz_wrong_answer (quiz)" in run.stdout


def test_an_unknown_bug_is_one_clear_line():
    run = subprocess.run([sys.executable, "-m", "grader.cli", "audit", "no_such_bug"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip().endswith("no bug named no_such_bug in " + str(DEFAULT))
