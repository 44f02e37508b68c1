"""A dependency that cannot run in float64: the dtype a dependent component is then checked in
(fallback.runnable_dtype), and the student's own backward as one step of a formula composed
here (through.through), on local stand-ins for the worker."""
import pytest
import torch
from torch import nn

from grader.results import Failed
from grader.sandbox.client import StudentError
from grader.suites.fallback import in_runnable_dtype, runnable_dtype
from grader.suites.through import through


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
