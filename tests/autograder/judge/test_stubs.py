"""The generated exercises/: in sync with solutions/, importable, and every exercise a stub."""
import inspect

import pytest
import torch

from grader.cli import main
from grader.sandbox.worker.loader import import_module, import_package
from grader.spec import COMPONENTS
from grader.stubs import BEGIN, EditedStubs, StubError, is_edited, release_stubs, stale_stubs, stub_source
from helpers import ROOT


def test_exercises_are_up_to_date_with_solutions():
    stale = stale_stubs(ROOT / "solutions", ROOT / "exercises")
    assert not stale, f"exercises/ is out of date for {stale}: run `grader release-stubs`"


def test_a_marked_block_becomes_a_raise_at_its_indentation():
    source = 'def f(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    return x + 1\n    # END SOLUTION\n'
    stub = stub_source(source)
    assert 'raise NotImplementedError("f: your code here' in stub
    assert '"""Doc."""' in stub and "x + 1" not in stub


def test_a_stub_block_replaces_a_module_level_solution():
    source = "# BEGIN SOLUTION\nA = 1\n# END SOLUTION\n# BEGIN STUB\n# A = None\n# END STUB\n"
    assert stub_source(source) == "A = None\n"


def test_methods_are_named_with_their_class():
    source = "class C:\n    def m(self):\n        # BEGIN SOLUTION\n        pass\n        # END SOLUTION\n"
    assert "C.m: your code here" in stub_source(source)


@pytest.mark.parametrize("source", ["# BEGIN SOLUTION\nx = 1\n", "# END SOLUTION\n",
                                    "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n"])
def test_unpaired_markers_are_errors(source):
    with pytest.raises(StubError):
        stub_source(source)


SOLUTION = 'def f(x):\n    """{}"""\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n'
"""A solution file; its docstring (kept in the stub) is the argument."""


@pytest.fixture
def released(tmp_path):
    """solutions/a.py and b.py, and the exercises/ release-stubs wrote from them."""
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    for name in ("a", "b"):
        (solutions / f"{name}.py").write_text(SOLUTION.format("One."))
    release_stubs(solutions, exercises)
    return solutions, exercises


def test_release_stubs_never_overwrites_an_edited_stub(released, capsys):
    solutions, exercises = released
    (solutions / "b.py").write_text(SOLUTION.format("Two."))  # b's stub is stale now, and unedited
    work = (exercises / "a.py").read_text().replace("raise NotImplementedError(", "return x  # (")
    (exercises / "a.py").write_text(work)
    with pytest.raises(EditedStubs, match="a.py: edited after"):
        release_stubs(solutions, exercises)
    assert main(["release-stubs", "--solutions", str(solutions), "--out", str(exercises)]) == 2
    assert "--force" in capsys.readouterr().err
    assert (exercises / "a.py").read_text() == work, "the student's work is kept"
    assert stale_stubs(solutions, exercises) == ["a.py", "b.py"], "and nothing else was written either"

    release_stubs(solutions, exercises, force=True)
    assert stale_stubs(solutions, exercises) == []


def test_release_stubs_regenerates_a_stale_unedited_stub(released):
    solutions, exercises = released
    (solutions / "b.py").write_text(SOLUTION.format("Two."))
    assert stale_stubs(solutions, exercises) == ["b.py"]
    release_stubs(solutions, exercises)
    assert stale_stubs(solutions, exercises) == [] and "Two." in (exercises / "b.py").read_text()


def test_an_exercise_file_without_the_generated_header_counts_as_edited(released):
    solutions, exercises = released
    (exercises / "a.py").write_text("def f(x):\n    return x + 1\n")
    with pytest.raises(EditedStubs):
        release_stubs(solutions, exercises)


@pytest.fixture(scope="module")
def exercises():
    return import_package(ROOT / "exercises", "exercises_under_test")


CALLS = {
    "attention": [lambda m: m.causal_mask(3),
                  lambda m: m.scaled_dot_product_attention(*[torch.zeros(2, 2)] * 3),
                  lambda m: m.MultiHeadAttention(8, 2)],
    "positional": [lambda m: m.sinusoidal_encoding(4, 8), lambda m: m.shift_rotation(1, 8),
                   lambda m: m.apply_rope(torch.zeros(2, 4)), lambda m: m.alibi_slopes(8),
                   lambda m: m.alibi_bias(8, 4)],
    "feedforward": [lambda m: m.FeedForward(8, 16)],
    "block": [lambda m: m.TransformerBlock(8, 2, 16)],
    "model": [lambda m: m.TinyTransformerLM(10)],
    "trainer": [lambda m: m.lr_schedule(0, max_lr=1.0, warmup_steps=1, total_steps=2),
                lambda m: m.param_groups(torch.nn.Linear(2, 2), 0.1),
                lambda m: m.train(torch.nn.Linear(2, 2), [], steps=1, max_lr=1.0),
                lambda m: m.evaluate(torch.nn.Linear(2, 2), [])],
    "analysis": [lambda m: m.attention_entropy(torch.ones(2, 2)),
                 lambda m: m.previous_token_score(torch.ones(2, 2)),
                 lambda m: m.induction_score(torch.ones(3, 3), 1),
                 lambda m: m.attention_maps(torch.nn.Linear(2, 2), torch.zeros(1, 2))],
}


"""Calls that must raise NotImplementedError in a component's stub: each listed component's, on top of what
test_every_component_has_a_stub_that_withholds_its_solution checks of every component."""


@pytest.mark.parametrize("module", COMPONENTS)
def test_every_component_has_a_stub_that_withholds_its_solution(module):
    stub, solution = ROOT / "exercises" / f"{module}.py", ROOT / "solutions" / f"{module}.py"
    assert stub.is_file() and not is_edited(stub.read_text()), f"run `grader release-stubs` for {module}"
    assert BEGIN in solution.read_text() and stub_source(solution.read_text()) != solution.read_text(), (
        f"solutions/{module}.py marks no `{BEGIN}` block: its stub would be the answer")


@pytest.mark.parametrize("module", sorted(CALLS))
def test_every_exercise_raises_not_implemented(exercises, module):
    assert module in COMPONENTS
    stubbed = import_module(exercises, module)
    for call in CALLS[module]:
        with pytest.raises(NotImplementedError):
            call(stubbed)


def test_the_quiz_stub_has_no_answers(exercises):
    assert import_module(exercises, "quiz").ANSWERS == {f"q{i}": None for i in range(1, 7)}


def test_stubs_keep_signatures_and_docstrings(exercises):
    solutions = import_package(ROOT / "solutions", "solutions_under_test")
    for module in COMPONENTS:
        ours, theirs = import_module(solutions, module), import_module(exercises, module)
        for name, obj in vars(ours).items():
            if inspect.isfunction(obj) and obj.__module__ == ours.__name__:
                stub = getattr(theirs, name)
                assert inspect.signature(stub) == inspect.signature(obj), name
                assert stub.__doc__ == obj.__doc__, name
