"""The tests, one module per SPEC.md component, each registering its cases on a Suite.

A case is a function of the Student proxy that raises checks.Failed (or lets the student's
exception through) when the property does not hold. Public cases use no reference and ship
to students for `grader check`; hidden cases compare with `grader.reference.ref`.
"""
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, settings

COMPONENTS = ("attention", "positional", "feedforward", "block", "model", "trainer", "analysis", "quiz")
DEPENDS = {
    "attention": ("positional",),
    "block": ("attention", "feedforward"),
    "model": ("block", "positional", "trainer"),
    "analysis": ("model",),
}
"""What each component's tests also run of the student's code (for the 'fix X first' notes)."""

settings.register_profile(
    "grader",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=12,
    report_multiple_bugs=False,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
)
settings.load_profile("grader")


@dataclass(frozen=True)
class Case:
    name: str
    component: str
    points: float
    public: bool
    timeout: float
    run: Callable
    doc: str


class Suite:
    """The cases of one component, in the order they are written."""

    def __init__(self, component: str):
        if component not in COMPONENTS:
            raise ValueError(f"unknown component {component!r}")
        self.component = component
        self.cases: list[Case] = []

    def case(self, points: float, *, public: bool = False, timeout: float = 8.0) -> Callable:
        """Register a test worth `points`; its docstring's first line says what it checks.

        timeout bounds the whole case, hypothesis's examples included: generous for correct
        code (tiny tensors), short enough that a hang costs seconds, not minutes.
        """
        def register(fn: Callable) -> Callable:
            doc = (fn.__doc__ or fn.__name__).strip().splitlines()[0]
            self.cases.append(Case(fn.__name__, self.component, points, public, timeout, fn, doc))
            return fn
        return register


def all_cases(public_only: bool = False, components: tuple[str, ...] = COMPONENTS) -> list[Case]:
    """The registered cases of these components, in order (each suite module defines `suite`)."""
    unknown = set(components) - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown component(s) {sorted(unknown)}; choose from {', '.join(COMPONENTS)}")
    cases = [case for name in COMPONENTS if name in components
             for case in importlib.import_module(f"{__name__}.{name}").suite.cases]
    return [c for c in cases if c.public] if public_only else cases
