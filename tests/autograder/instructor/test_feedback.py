"""What the student reads when part of the work is unfinished, broken or forbidden: a test that stops
at another component's stub names the function it waits for; a file that cannot be imported is said
in one line for every test it costs, without running them; a submission built on what docs/spec.md
forbids loses the tests that use it; and the terminal report says each of these once."""
import shutil
from pathlib import Path

import pytest

from grader.judge import judge
from grader.report import public_share, terminal
from grader.results import Result
from grader.scoring import scorecard
from grader.spec import COMPONENT_POINTS, Status, Visibility
from grader.suites import all_cases
from helpers import ROOT

FLOOD = "for _ in range(10**6):\n    print('x' * 100)\n"


def submission(tmp_path: Path, **files: str | None) -> Path:
    """A copy of the reference with these files replaced (None: removed)."""
    folder = tmp_path / "submission"
    shutil.copytree(ROOT / "solutions", folder)
    for name, text in files.items():
        if text is None:
            (folder / f"{name}.py").unlink()
        else:
            (folder / f"{name}.py").write_text(text)
    return folder


def outcomes(results: list[Result]) -> dict[str, set[tuple[Status, str]]]:
    found: dict[str, set[tuple[Status, str]]] = {}
    for r in results:
        found.setdefault(r.component, set()).add((r.status, r.message))
    return found


@pytest.mark.sandbox
def test_a_finished_attention_names_the_stub_it_waits_for(tmp_path):
    stubbed = submission(tmp_path, positional=(ROOT / "exercises" / "positional.py").read_text())
    results = judge(stubbed, public_only=True, components=("attention",))
    waiting = [r for r in results if r.status is not Status.PASSED]
    assert waiting, "some public attention test uses rope"
    assert {(r.status, r.message) for r in waiting} == {
        (Status.NOT_ATTEMPTED, "waiting for positional.apply_rope (still a stub)")}
    text = terminal(scorecard(results), "Check")
    assert "  attention: waiting for positional.apply_rope (still a stub)" in text.splitlines()
    assert "Not attempted" not in text


@pytest.mark.sandbox
def test_a_file_that_cannot_be_imported_is_said_once_and_its_tests_do_not_run(tmp_path):
    """A SyntaxError (and attention.py, which imports that file), a missing file, a hang and a print flood
    at import time, and a function of another file that raises when called at import time: every test of
    the component gets one line that names the file at fault (a test that ran would start with its own
    description), and the report says it once per component."""
    broken = submission(tmp_path, positional="def broken(:\n", feedforward=None, trainer=FLOOD,
                        quiz="while True:\n    pass\n",
                        helpers="def table():\n    raise ValueError('no table')\n",
                        analysis="from .helpers import table\n\nTABLE = table()\n")
    results = judge(broken, public_only=True, timeout_scale=0.3,
                    components=("attention", "positional", "feedforward", "trainer", "analysis", "quiz"))
    syntax = "positional.py: SyntaxError at line 1: invalid syntax"
    assert outcomes(results) == {
        "analysis": {(Status.FAILED, "analysis.py: importing it raised ValueError: no table "
                                     "(helpers.py, line 2, in table)")},
        "positional": {(Status.FAILED, syntax)},
        "attention": {(Status.FAILED, f"{syntax} (attention.py imports it)")},
        "feedforward": {(Status.FAILED, "feedforward.py is missing")},
        "trainer": {(Status.FAILED, "trainer.py: your code printed more than 8 MiB: remove the prints")},
        "quiz": {(Status.TIMED_OUT, "importing quiz.py did not finish within 3 s of CPU time (an infinite "
                                    "loop at import time?)")},
    }
    problems = terminal(scorecard(results), "Check").split("What to look at:\n")[1].splitlines()
    attention = len(all_cases(public_only=True, components=("attention",)))
    assert len(problems) == 6 and problems[0].startswith(f"  [attention] {attention} tests (failed, ")


@pytest.mark.sandbox
def test_a_test_that_runs_a_file_that_cannot_be_imported_says_so_in_that_files_line(tmp_path):
    """analysis.py is fine; its tests that build a model run model.py, which has a SyntaxError."""
    results = judge(submission(tmp_path, model="def broken(:\n"), public_only=True, components=("analysis",))
    syntax = "model.py: SyntaxError at line 1: invalid syntax"
    assert outcomes(results)["analysis"] == {(Status.PASSED, ""), (Status.FAILED, syntax)}


@pytest.mark.sandbox
def test_a_submission_built_on_what_the_contract_forbids_loses_those_tests(tmp_path):
    """Its attention calls torch's scaled_dot_product_attention (imported at import time) and its
    MultiHeadAttention is torch's (test_sandbox.py: each refuses in the worker too)."""
    attention = (ROOT / "solutions" / "attention.py").read_text() + '''

from torch.nn.functional import scaled_dot_product_attention as torch_attention


def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    return torch_attention(q, k, v, attn_mask=mask), None


class MultiHeadAttention(nn.MultiheadAttention):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True, rope=False, rope_base=10000.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=bias, batch_first=True)
'''
    results = judge(submission(tmp_path, attention=attention), public_only=True, components=("attention",))
    rules = {"docs/spec.md forbids torch.nn.functional.scaled_dot_product_attention in the exercises",
             "docs/spec.md forbids torch.nn.MultiheadAttention in the exercises"}
    # The judge reads the file before importing it: every test says so once, naming the line.
    assert all(r.status is Status.FAILED and r.message.startswith("attention.py, line ")
               and any(rule in r.message for rule in rules) for r in results)


def _result(name: str, component: str, status: Status, message: str, points: float = 1.0) -> Result:
    return Result(name, component, points if status is Status.PASSED else 0.0, points, status, message,
                  Visibility.HIDDEN)


def test_the_report_says_a_shared_message_once_and_who_waits_for_what():
    card = scorecard([
        _result("a1", "attention", Status.PASSED, ""),
        _result("a2", "attention", Status.NOT_ATTEMPTED, "waiting for positional.apply_rope (still a stub)"),
        _result("p1", "positional", Status.NOT_ATTEMPTED, "not attempted: apply_rope: your code here"),
        _result("f1", "feedforward", Status.FAILED, "feedforward.py is missing"),
        _result("f2", "feedforward", Status.FAILED, "feedforward.py is missing", 2.0),
        _result("q1", "quiz", Status.FAILED, "q1: wrong"),
    ])
    lines = terminal(card, "Check").splitlines()
    table = {line.split()[0]: line.split()[1:] for line in lines[3:8]}
    assert table["attention"] == ["1/2", "1/2", "waiting"]
    assert table["positional"] == ["0/1", "0/1", "not", "attempted"]
    assert table["feedforward"] == ["0/3", "0/2", "needs", "work"]
    assert "  [feedforward] 2 tests (failed, 0/3): feedforward.py is missing" in lines
    assert "  [quiz] q1 (failed, 0/1): q1: wrong" in lines
    assert "  attention: waiting for positional.apply_rope (still a stub)" in lines
    assert lines[-1] == "Not attempted yet (still raising NotImplementedError): positional"
    hidden = "hidden tests run when your work is graded"
    ran = sum(COMPONENT_POINTS[name] for name in ("attention", "positional", "feedforward", "quiz"))
    assert public_share(card) == f"public tests: 7 of {ran:g} points; {hidden}"
