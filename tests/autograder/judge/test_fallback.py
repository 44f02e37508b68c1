"""A dependency that cannot run in float64: the dtype a dependent component is then checked in
(fallback.runnable_dtype), only where the dependency's own float64 tests failed in the grading (the
judge's evidence, not the student's behaviour when probed: issue 29), and the student's own backward as
one step of a formula composed here (through.through), on local stand-ins for the worker."""
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from grader.judge import judge
from grader.results import Failed, Result
from grader.sandbox.errors import StudentError
from grader.spec import COMPONENT_POINTS, COMPONENTS, Status, Visibility
from grader.suites import all_cases
from grader.suites.fallback import (
    PROBED,
    Seen,
    in_runnable_dtype,
    may_fall_back,
    observing,
    runnable_dtype,
)
from grader.suites.through import through
from helpers import EXAMPLES, load_bugs


def _softmax_in_float32(dtype: torch.dtype) -> torch.Tensor:
    return torch.ones(3, dtype=dtype).float().softmax(-1)  # float32 whatever it is given


def _raises_in_float64(dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float64:
        raise StudentError("RuntimeError", "expected scalar type Float but found Double")
    return torch.ones(3, dtype=dtype)


def _raises_always(dtype: torch.dtype) -> torch.Tensor:
    raise StudentError("ValueError", "a bug of its own")


@pytest.mark.parametrize(("run", "expected"), [
    (lambda dtype: (torch.ones(2, dtype=dtype), [torch.zeros(1, dtype=dtype)]), torch.float64),
    (_softmax_in_float32, torch.float32),
    (_raises_in_float64, torch.float32),
    (_raises_always, torch.float64),  # no dtype runs it: the test runs as it would, and fails as it does
])
def test_a_test_falls_back_to_float32_only_where_the_dependency_runs_there(run, expected):
    assert runnable_dtype(run, torch.float64) == expected
    assert runnable_dtype(run, torch.float32) == torch.float32


@pytest.mark.parametrize(("run", "passes_in", "outcome", "probed"), [
    (_raises_in_float64, {torch.float64, torch.float32}, [torch.float64], False),  # passes: no probe
    (_raises_in_float64, {torch.float32}, [torch.float64, torch.float32], True),  # checked in float32
    (_softmax_in_float32, set(), [torch.float64, torch.float32, Failed], True),  # float32's failure stands
    (_raises_always, {torch.float32}, [torch.float64, Failed], True),  # float64's failure stands
    (lambda dtype: torch.ones(2, dtype=dtype), set(), [torch.float64, Failed], True),
])
def test_the_dependency_is_probed_only_where_the_check_fails_and_the_verdict_is_runnable_dtypes(
        run, passes_in, outcome, probed):
    """in_runnable_dtype gives check(runnable_dtype(run, float64))'s verdict, probing only after a failure."""
    calls, ran = [], []

    def check(dtype: torch.dtype) -> None:
        calls.append(dtype)
        if dtype not in passes_in:
            raise Failed(f"fails in {dtype}")

    def probe(dtype: torch.dtype) -> torch.Tensor:
        ran.append(dtype)
        return run(dtype)

    try:
        in_runnable_dtype(check, probe, torch.float64)
    except Failed as failure:
        assert str(failure) == f"fails in {calls[-1]}"
        calls.append(Failed)
    assert calls == outcome and bool(ran) == probed


class _Local:
    """A stand-in for a Remote: the module runs here, its backward as the worker does it."""

    def __init__(self, module: nn.Module):
        self.module = module

    def __call__(self, z: torch.Tensor, **kwargs):
        with torch.no_grad():
            return self.module(z, **kwargs)

    def method(self, name: str, *args):
        return getattr(self.module, name)(*args)

    def grad(self, args: list, kwargs: dict, *, grad_outputs: list, wrt: tuple):
        z = args[0].detach().requires_grad_(True)
        with torch.enable_grad():  # autograd runs a backward with grad mode off; the worker is apart
            self.module(z, **kwargs).backward(grad_outputs[0])
        return None, {0: z.grad}, {n: p.grad for n, p in self.module.named_parameters()}


def test_a_formula_backpropagates_through_the_students_own_backward():
    torch.manual_seed(0)
    inner, outer = nn.Linear(4, 4), nn.Linear(4, 4)
    x, g = torch.randn(2, 4, requires_grad=True), torch.randn(2, 4)
    (x + outer(torch.tanh(inner(x)))).backward(g)
    expected = {n: p.grad.clone() for n, p in outer.named_parameters()}
    x_grad = x.grad.clone()
    inner.zero_grad()
    outer.zero_grad()
    x.grad, grads = None, {}
    (x + through(_Local(outer), torch.tanh(inner(x)), grads)).backward(g)
    assert torch.allclose(x.grad, x_grad) and grads.keys() == expected.keys()
    assert all(torch.allclose(grads[n], expected[n]) for n in expected)


# ---------------------------------------------------------------- the fallback is the judge's choice
def _seen(graded: tuple[str, ...], component: str, results: dict[str, Status]) -> Seen:
    """What the judge records of these results ("component.test": status), each case as registered."""
    cases = {f"{case.component}.{case.name}": case for case in all_cases()}
    seen = Seen(frozenset(graded), component)
    for name, status in results.items():
        case = cases[name]
        result = Result(case.name, case.component, 0.0, 1.0, status, "", case.visibility)
        seen.saw(result, float64=case.float64)
    return seen


SUBLAYERS_AND_BLOCK = ("attention", "feedforward", "block")


@pytest.mark.parametrize(("graded", "component", "results", "expected"), [
    (SUBLAYERS_AND_BLOCK, "block", {"attention.sdpa_shapes_and_dtype": Status.PASSED}, False),
    (SUBLAYERS_AND_BLOCK, "block", {"attention.sdpa_shapes_and_dtype": Status.FAILED}, True),
    (SUBLAYERS_AND_BLOCK, "block", {"feedforward.ffn_contract": Status.TIMED_OUT}, True),
    # a failure that says nothing of float64 opens nothing
    (SUBLAYERS_AND_BLOCK, "block", {"attention.mha_value_errors": Status.FAILED}, False),
    (("block",), "block", {}, True),  # its dependencies are not graded: the probe decides, as it would
    (COMPONENTS, "model", {"attention.mha_matches_reference": Status.FAILED}, True),  # through the block
    (COMPONENTS, "analysis", {"block.block_formula": Status.FAILED}, True),
    (COMPONENTS, "analysis", {"block.block_state_dict": Status.FAILED}, False),
    (COMPONENTS, "block", {"model.logits_follow_m1": Status.FAILED}, False),  # not a dependency
])
def test_only_a_dependencys_own_float64_tests_open_the_fallback(graded, component, results, expected):
    assert _seen(graded, component, results).may_fall_back() is expected


def test_each_probed_component_has_float64_tests_public_ones_among_them():
    # public ones: the public phase (the block's public tests run before attention's hidden ones)
    # decides from what it saw too
    for component in PROBED:
        cases = [case for case in all_cases(components=(component,)) if case.float64]
        assert any(case.public for case in cases) and any(not case.public for case in cases), component


def test_a_dependency_that_passed_its_float64_tests_is_not_probed():
    ran = []

    def probe(dtype: torch.dtype) -> torch.Tensor:
        ran.append(dtype)
        return _raises_in_float64(dtype)

    def check(dtype: torch.dtype) -> None:
        raise Failed(f"fails in {dtype}")

    with observing(SUBLAYERS_AND_BLOCK) as seen:
        seen.component = "block"
        seen.saw(Result("mha_matches_reference", "attention", 1.0, 1.0, Status.PASSED, "", Visibility.HIDDEN),
                 float64=True)
        with pytest.raises(Failed, match="fails in torch.float64"):
            in_runnable_dtype(check, probe, torch.float64)
        assert runnable_dtype(probe, torch.float64) == torch.float64 and not ran
        seen.saw(Result("mha_matches_reference", "attention", 0.0, 1.0, Status.FAILED, "", Visibility.HIDDEN),
                 float64=True)
        assert runnable_dtype(probe, torch.float64) == torch.float32
    assert may_fall_back()  # outside a grading: the probe decides


def _submission(tmp_path: Path, name: str, edits: list[tuple[str, str, str]]) -> Path:
    """correct/ with each (file, old, new) replacement (old found exactly once)."""
    bugs = load_bugs()
    dest = tmp_path / name
    shutil.copytree(EXAMPLES / "correct", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for file, old, new in edits:
        path = dest / file
        path.write_text(bugs.apply(bugs.Bug(name, file.removesuffix(".py"), file, old=old, new=new,
                                            description="a variant.", keywords=("x",)), path.read_text()))
    return dest


OFF_BY_3E_5 = ("block.py", "        y, w = sublayers(x, mask, bias)\n",
               "        y, w = sublayers(x, mask, bias)\n        y = y * (1 + 3e-5)\n")
# The block's attn refuses float64 when the judge calls it directly for its weights (the dtype probe, the
# formula check's own sublayer calls), and runs it within the block's forward: attention's own tests never
# see it, nor do the block's tests that call its attn for y alone (block_sublayer_arguments).
REFUSES_DIRECT_CALLS = [
    ("block.py", "        sublayers = self._pre if self.pre_norm else self._post\n"
                 "        y, w = sublayers(x, mask, bias)\n",
     "        sublayers = self._pre if self.pre_norm else self._post\n"
     "        self.attn.within_block = True\n"
     "        try:\n"
     "            y, w = sublayers(x, mask, bias)\n"
     "        finally:\n"
     "            self.attn.within_block = False\n"
     "        y = y * (1 + 3e-5)\n"),
    ("block.py", "        self.norm1 = nn.LayerNorm(d_model)\n",
     "        self.norm1 = nn.LayerNorm(d_model)\n        self.attn.within_block = False\n"),
    ("attention.py", '        # one fused matmul for the three projections\n',
     '        # one fused matmul for the three projections\n'
     '        if return_weights and getattr(self, "within_block", True) is False \\\n'
     '                and x.dtype == torch.float64:\n'
     '            raise RuntimeError("expected scalar type Float but found Double")\n'),
]


def _scores(results) -> dict[str, float]:
    scores: dict[str, float] = {}
    for result in results:
        scores[result.component] = scores.get(result.component, 0.0) + result.score
    return scores


@pytest.mark.slow
@pytest.mark.sandbox
def test_an_attn_that_refuses_float64_only_to_the_judge_buys_its_block_no_tolerance(tmp_path):
    """Issue 29: a block off by 3e-5 (relative) loses its formula tests whether or not its attn refuses
    float64 to direct calls only; attention passes every test of its own either way."""
    plain = judge(_submission(tmp_path, "off", [OFF_BY_3E_5]), components=SUBLAYERS_AND_BLOCK)
    refusing = judge(_submission(tmp_path, "refusing", REFUSES_DIRECT_CALLS), components=SUBLAYERS_AND_BLOCK)
    for results in (plain, refusing):
        failed = {r.name for r in results if r.status is not Status.PASSED}
        assert {"block_formula", "block_pre_norm_formula", "block_post_norm_formula"} <= failed, failed
        assert not [r for r in results if r.component != "block" and r.status is not Status.PASSED]
    assert _scores(refusing)["block"] == _scores(plain)["block"], (
        [f"{r.name}: {r.status}: {r.message}" for r in refusing if r.component == "block"])


@pytest.mark.slow
@pytest.mark.sandbox
def test_an_attention_that_cannot_run_in_float64_still_costs_attention_only(tmp_path):
    # graded with its dependencies, so that the block's fallback rests on what attention's tests saw
    submission = load_bugs().materialize(load_bugs().BY_NAME["softmax_in_float32"], tmp_path)
    results = judge(submission, components=SUBLAYERS_AND_BLOCK)
    lost = [f"{r.component}.{r.name}: {r.message}" for r in results
            if r.status is not Status.PASSED and r.component != "attention"]
    assert not lost, "\n".join(lost)
    assert _scores(results)["attention"] < COMPONENT_POINTS["attention"]
