"""grader/spec.py's facts that copy the code's: the model's defaults are the reference's own,
DEPENDS covers what each solution file imports of the others, and each time limit derived from
the budgets stays above what it guards."""
import ast
import inspect

import pytest

from grader.instructor.runner import Job
from grader.sandbox.client import Sandbox
from grader.spec import BUDGETS, COMPONENTS, DEPENDS, MODEL_DEFAULTS
from grader.suites import all_cases
from helpers import ROOT
from solutions.model import TinyTransformerLM

RUN_NOT_IMPORTED = {("model", "trainer"): "the model's training runs use the student's trainer",
                    ("analysis", "model"): "attention_maps is given a model and runs it"}
"""Dependencies that no import shows: what a component's tests run of another."""


def test_model_defaults_are_the_references_signature():
    signature = inspect.signature(TinyTransformerLM.__init__).parameters
    defaults = {name: p.default for name, p in signature.items() if p.default is not inspect.Parameter.empty}
    assert MODEL_DEFAULTS == defaults


def _imports(component: str) -> set[str]:
    tree = ast.parse((ROOT / "solutions" / f"{component}.py").read_text())
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}


def test_depends_is_what_the_solutions_import_and_what_their_tests_run():
    for component in COMPONENTS:
        depends = set(DEPENDS.get(component, ()))
        assert _imports(component) <= depends, f"{component} imports more than DEPENDS says"
        extra = {(component, other) for other in depends - _imports(component)}
        assert extra <= RUN_NOT_IMPORTED.keys(), f"DEPENDS[{component!r}]: neither imported nor run"
    assert all(other in DEPENDS[component] for component, other in RUN_NOT_IMPORTED)


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_the_limits_that_guard_a_budget_stay_above_it(scale, tmp_path):
    budgets = BUDGETS.scaled(scale)
    assert budgets.submission == BUDGETS.submission * scale and budgets.case == BUDGETS.case * scale
    imports = len(COMPONENTS) * budgets.file_import
    assert budgets.case < budgets.submission / len(COMPONENTS)
    assert budgets.worker_cpu_seconds > budgets.submission + imports  # a worker is never cut short
    assert budgets.backstop > budgets.submission + imports + len(COMPONENTS) * budgets.worker_start
    sandbox = Sandbox(ROOT / "solutions", tmp_path, timeout_scale=scale)
    assert sandbox.limits.cpu_seconds == budgets.worker_cpu_seconds
    assert Job("a.zip", b"").seconds == BUDGETS.backstop


def test_cases_default_to_the_case_budget():
    timeouts = {case.timeout for case in all_cases()}
    assert BUDGETS.case in timeouts and max(timeouts) < BUDGETS.submission
