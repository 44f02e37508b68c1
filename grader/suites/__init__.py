"""The tests, two modules per docs/spec.md component: `public/<component>.py` (no reference: they ship
to students for `grader check`) and `hidden/<component>.py` (compared with the reference, with
diagnoses of classic mistakes). Each module registers its cases on a Suite.

A case is a function of the Student proxy that raises checks.Failed (or lets the student's
exception through) when the property does not hold.
"""
import functools
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings

from ..salt import PUBLIC_SALT, case_seed
from ..spec import BUDGETS, COMPONENTS, Visibility
from .strategies import key_seeds

GRADER_SETTINGS = settings(
    database=None,
    deadline=None,
    max_examples=12,
    report_multiple_bugs=False,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
)
"""Every case runs under these, seeded from its name and a salt (grader/salt.py): the same
submission gets the same examples every run of one deployment."""


def _local_constants_hook() -> Any:
    """hypothesis's module that draws constants of "local" modules; None for a version that collects
    none, or one whose internals used here changed (then tests/autograder/judge/test_draws.py fails, if local
    constants are still drawn)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants  # noqa: F401 - there is a pool to empty
    except ImportError:
        return None
    if not (hasattr(providers, "_get_local_constants") and hasattr(providers, "CONSTANTS_CACHE")):
        return None
    return providers


@functools.cache
def _no_local_constants() -> Any:
    """Stands in for hypothesis's `_get_local_constants`: an empty pool of local constants."""
    from hypothesis.internal.constants_ast import Constants
    return Constants()


@contextmanager
def without_local_constants() -> Iterator[None]:
    """Draw no constants of local modules while a case (or a whole grading) runs.

    hypothesis draws a constant with probability 0.05 a draw, half the time one of the code under
    test: the ints, floats and strings in the source of each module in sys.modules whose file is
    outside site-packages and the standard library (the grader's own, when it is installed
    editable). The hidden inputs would then depend on the installation and on which modules are
    loaded, not on the salt alone, and a fresh folder would pay for parsing them (and get a
    .hypothesis/constants/ cache). hypothesis has no setting for this: its hook gets an empty pool
    for the duration. Nested, it changes nothing: the pools hypothesis caches meanwhile (global
    constants filtered per kind of draw) stay valid for every case of a grading.
    """
    providers = _local_constants_hook()
    if providers is None or providers._get_local_constants is _no_local_constants:
        yield
        return
    hook = providers._get_local_constants
    providers._get_local_constants = _no_local_constants
    providers.CONSTANTS_CACHE.cache.clear()  # its pools may hold local constants drawn before
    try:
        yield
    finally:
        providers._get_local_constants = hook
        providers.CONSTANTS_CACHE.cache.clear()


class HiddenTestsMissing(RuntimeError):
    """The hidden suites are not installed (a student release): only `grader check` can run."""


@dataclass(frozen=True)
class Case:
    name: str
    component: str
    points: float
    visibility: Visibility
    timeout: float
    run: Callable
    doc: str
    integration: bool = False
    """Runs the student's whole stack (e.g. a training run): a bug anywhere may cost it."""
    float64: bool = False
    """Runs its component's own module in float64: where it fails, the tests of the components built on it
    may fall back to float32 (grader/suites/fallback.py)."""

    @property
    def public(self) -> bool:
        return self.visibility is Visibility.PUBLIC

    def examples_seed(self, salt: str) -> int:
        """The seed of this case's examples under a deployment's salt (grader/salt.py): a public
        case's does not depend on it."""
        return case_seed(PUBLIC_SALT if self.public else salt, self.component, self.name)

    def seed_examples(self, salt: str) -> int:
        """Seed hypothesis's draws for this case (and return the seed, which also seeds torch)."""
        value = self.examples_seed(salt)
        if hasattr(self.run, "hypothesis"):
            seed(value)(self.run)
        key_seeds(value)  # tensor seeds hashed with it: salted, for a hidden case
        return value


class Suite:
    """The cases of one component and visibility, in the order they are written."""

    def __init__(self, component: str, visibility: Visibility):
        if component not in COMPONENTS:
            raise ValueError(f"unknown component {component!r}")
        self.component, self.visibility = component, visibility
        self.cases: list[Case] = []

    def case(self, points: float, *, timeout: float = BUDGETS.case, integration: bool = False,
             float64: bool = False, **hypothesis: Any) -> Callable:
        """Register a test worth `points`; its docstring's first paragraph says what it checks.

        timeout bounds the whole case, hypothesis's examples included: generous for correct
        code (tiny tensors), short enough that a hang costs seconds, not minutes. An integration
        case runs the student's whole stack rather than one component's own work. A float64 case runs
        its component's module in float64 (Case.float64). `hypothesis` overrides GRADER_SETTINGS for
        this case (e.g. max_examples=4 for a slow one).
        """
        def register(fn: Callable) -> Callable:
            if any(case.name == fn.__name__ for case in self.cases):
                raise ValueError(f"{self.component} has two cases named {fn.__name__!r}")
            if hasattr(fn, "hypothesis"):
                fn = settings(GRADER_SETTINGS, **hypothesis)(fn)
                # No database, so no key: else hypothesis hashes the test's source at every run (as its
                # own find() does where there is no database); tests/autograder/judge/test_draws.py checks
                # that hypothesis still reads it
                fn._hypothesis_internal_database_key = None
            doc = " ".join((fn.__doc__ or fn.__name__).strip().split("\n\n")[0].split())
            self.cases.append(Case(fn.__name__, self.component, points, self.visibility, timeout, fn, doc,
                                   integration, float64))
            return fn
        return register


def _suite(component: str, visibility: Visibility) -> Suite:
    try:
        return importlib.import_module(f"{__name__}.{visibility.value}.{component}").suite
    except ModuleNotFoundError as error:
        if visibility is Visibility.HIDDEN and error.name == f"{__name__}.hidden":
            raise HiddenTestsMissing("the hidden tests are not part of this installation (a student "
                                     "release?): `grader check` runs the public ones") from error
        raise


def all_cases(public_only: bool = False, components: tuple[str, ...] = COMPONENTS) -> list[Case]:
    """The registered cases of these components, in order: each one's public cases, then its hidden."""
    unknown = set(components) - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown component(s) {sorted(unknown)}; choose from {', '.join(COMPONENTS)}")
    visibilities = (Visibility.PUBLIC,) if public_only else tuple(Visibility)
    return [case for name in COMPONENTS if name in components
            for visibility in visibilities for case in _suite(name, visibility).cases]
