"""Deferred calls (Student.defer): seeding the worker and setting a module's mode or dtype go with the next
call, in one message, and a case's result is the one it would have been had each been sent at once."""
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.judge import GuardedStudent, run_case
from grader.results import Failed
from grader.sandbox.client import Sandbox, StudentError
from grader.spec import Status, Visibility
from grader.suites import Suite
from grader.suites.fallback import in_runnable_dtype
from helpers import ROOT

pytestmark = pytest.mark.sandbox

ODD = textwrap.dedent("""\
    import torch
    CALLS = []
    class Stubborn(torch.nn.Module):
        def train(self, mode=True):
            raise ValueError("this module has no modes")
        def forward(self, x):
            return x
    def note(value):
        CALLS.append(value)
    def noted():
        return list(CALLS)
    def ones64():
        return torch.ones(2, dtype=torch.float64)
    def boom():
        raise KeyError("boom")
    def deep():
        value = []
        for _ in range(40):
            value = [value]
        return value
    """)


@pytest.fixture(scope="module")
def odd(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("odd")
    (folder / "model.py").write_text(ODD)
    return folder


def _result(fn, submission: Path, scratch: Path):
    suite = Suite("model", Visibility.PUBLIC)
    suite.case(1.0, timeout=30)(fn)
    sandbox = Sandbox(submission, scratch)
    try:
        return run_case(suite.cases[0], GuardedStudent(sandbox))
    finally:
        sandbox.close()


def test_deferred_calls_go_with_the_next_call_in_one_message(tmp_path, monkeypatch):
    sent = []
    original = Sandbox.request

    def spy(self, message, limit):
        sent.append(message["op"])
        return original(self, message, limit)
    monkeypatch.setattr(Sandbox, "request", spy)

    def body(student):
        student.manual_seed(3)
        model = student.call("model.TinyTransformerLM", 5, d_model=8, n_heads=2, n_layers=1, d_ff=8,
                             max_len=4)
        logits = model.to(torch.float64).eval()(torch.zeros(1, 4, dtype=torch.long))
        assert logits.dtype == torch.float64

    assert _result(body, ROOT / "solutions", tmp_path).status is Status.PASSED
    assert sent == ["batch", "batch", "reset"]


@pytest.mark.parametrize("last", ["call", "nothing", "judge fails"])
def test_a_deferred_call_that_raises_fails_the_case_as_if_it_had_been_sent_at_once(odd, tmp_path, last):
    """Whatever follows the deferred call (another call, nothing, a failure found by the judge), the case
    gets the message of the call sent at once."""
    def at_once(student):
        """the module in eval mode"""
        module = student.call("model.Stubborn")
        module.method("train", False)

    def deferred(student):
        """the module in eval mode"""
        module = student.call("model.Stubborn")
        module.eval()
        if last == "call":
            module(torch.ones(2))
        elif last == "judge fails":
            raise Failed("the judge found something else first")

    expected = _result(at_once, odd, tmp_path)
    assert expected.status is Status.FAILED and "ValueError: this module has no modes" in expected.message
    got = _result(deferred, odd, tmp_path)
    assert (got.status, got.message) == (expected.status, expected.message)


@pytest.mark.parametrize("mode", ["at once", "deferred"])
def test_a_test_that_catches_errors_to_fall_back_catches_a_deferred_calls_error(odd, tmp_path, mode):
    def case(student):
        """the module in a runnable dtype"""
        def check(dtype):
            module = student.call("model.Stubborn")
            module.method("train", False) if mode == "at once" else module.eval()
            raise Failed("the judge found something else first")
        in_runnable_dtype(check, lambda dtype: student.call("model.ones64"), torch.float64)

    result = _result(case, odd, tmp_path)
    assert result.status is Status.FAILED and "ValueError: this module has no modes" in result.message


def test_each_example_flushes_what_it_deferred(odd, tmp_path):
    @given(n=st.integers(0, 3))
    def each_example(student, n):
        student.call("model.note", n)
        student.call("model.Stubborn").eval()

    result = _result(each_example, odd, tmp_path)
    assert result.status is Status.FAILED and "this module has no modes" in result.message
    assert "[input: n=0]" in result.message


def test_a_batch_stops_at_the_first_call_that_raises_or_returns_what_cannot_cross(odd, tmp_path):
    box = Sandbox(odd, tmp_path)

    def call(target, *args):
        return {"op": "call", "target": target, "args": list(args), "kwargs": {}}
    try:
        with pytest.raises(StudentError, match="boom"):
            box.request({"op": "batch", "requests": [call("model.note", 1), call("model.boom"),
                                                     call("model.note", 2)]}, 10)
        with pytest.raises(StudentError, match="cannot be graded"):
            box.request({"op": "batch", "requests": [call("model.deep"), call("model.note", 3)]}, 10)
        replies = box.request({"op": "batch", "requests": [call("model.note", 4), call("model.noted")]}, 10)
        assert replies == [{"result": None}, {"result": [1, 4]}]
    finally:
        box.close()
