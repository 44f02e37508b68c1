"""`grader selftest --only NAME` (grader/instructor/selftest.py): the reference and the correct example pass,
each of the component's bugs is caught in it with a message naming its keywords, and a bug whose message
names none of them, or that no test catches, fails the selftest."""
from dataclasses import replace
from types import SimpleNamespace

import pytest

from grader.cli import main
from grader.instructor import selftest
from helpers import load_bugs

pytestmark = pytest.mark.sandbox
bugs = load_bugs()


def test_the_quiz_passes_its_selftest(capsys):
    assert main(["selftest", "--only", "quiz"]) == 0
    out = capsys.readouterr().out
    assert "ok   reference" in out and "ok   correct example" in out and "ok   bug quiz_wrong_answer" in out


@pytest.mark.slow
def test_a_bug_missed_or_unnamed_fails_the_selftest(monkeypatch):
    wrong = bugs.BY_NAME["quiz_wrong_answer"]
    corpus = SimpleNamespace(CORRECT=bugs.CORRECT, materialize=bugs.materialize, BUGS=[
        replace(wrong, keywords=("nowhere",)),
        replace(wrong, name="no_change", old='q1="b",', new='q1="b" ,')])
    monkeypatch.setattr(selftest, "load_bugs", lambda path: corpus)
    verdicts = {v.what: v for v in selftest.selftest("quiz")}
    assert verdicts["reference"].ok and verdicts["correct example"].ok
    unnamed = verdicts["bug quiz_wrong_answer"]
    assert not unnamed.ok and "no message names ('nowhere',)" in unnamed.said
    assert not verdicts["bug no_change"].ok and "no quiz test failed" in verdicts["bug no_change"].said
