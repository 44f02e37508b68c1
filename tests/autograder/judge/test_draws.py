"""A case's examples are a fact of its seed (the salt's), not of the process that draws them: the
judge turns off hypothesis's draws of constants found in "local" modules
(grader.suites.without_local_constants), which would otherwise depend on how the grader is
installed and on which modules happen to be loaded."""
import importlib
import sys

import hypothesis.configuration
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers

from grader.judge import GuardedStudent, run_case
from grader.spec import Status, Visibility
from grader.suites import Case, Suite, without_local_constants

PLANTED = [(2**61 - 1) // (k + 3) for k in range(64)]
"""Large, unremarkable integers (not powers of two, nor near them: not among hypothesis's own
constants), which a random 64-bit draw all but never hits."""


class _NoWorker:
    """run_case's view of a sandbox, for a case that never calls the student."""

    def ready(self) -> None:
        pass

    def allowance(self, limit: float, wall_scale: float) -> None:
        return None

    def request(self, message: dict, seconds: float) -> dict:
        return {}


def _seed_draws() -> tuple[Case, list[list[int]]]:
    """A case drawing 50 integers in the range of the suites' tensor seeds per example, and its draws."""
    found: list[list[int]] = []
    suite = Suite("quiz", Visibility.HIDDEN)

    @suite.case(1.0)
    @given(values=st.lists(st.integers(0, 2**64 - 1), min_size=50, max_size=50))
    def draws(student, values: list[int]) -> None:
        found.append(values)

    return suite.cases[0], found


def _drawn() -> list[list[int]]:
    case, found = _seed_draws()
    assert run_case(case, GuardedStudent(_NoWorker()), salt="tests").status is Status.PASSED
    return found


def test_a_case_draws_the_same_examples_whatever_local_modules_are_loaded(tmp_path, monkeypatch):
    """hypothesis draws a local module's constant with probability 0.05 x 1/2 a draw: here about 15
    draws of the 600 (12 examples of 50) would come from the local pool, which the planted module
    changes (P(none) < 1e-6 for any seed, so this is not one lucky seed), and some would be planted
    values. With the judge's hook, the pool is empty: the same examples, none planted, nothing parsed
    or cached in a .hypothesis folder, and hypothesis's own hook back in place after each case."""
    home = tmp_path / "hypothesis-home"
    monkeypatch.setattr(hypothesis.configuration, "__hypothesis_home_directory", home)
    original = providers._get_local_constants
    before = _drawn()

    (tmp_path / "planted_constants.py").write_text(f"CONSTANTS = {PLANTED!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "planted_constants", importlib.import_module("planted_constants"))
    after = _drawn()

    assert len(before) == 12 and after == before
    assert not set(PLANTED) & {value for example in after for value in example}
    assert not home.exists(), "hypothesis parsed local modules and cached their constants"
    assert providers._get_local_constants is original


def test_a_hypothesis_without_the_hook_is_left_as_it_is(monkeypatch):
    """Older hypothesis (pyproject allows 6.80) collects no local constants (no constants_ast), and a
    newer one may rename its internals: the judge then runs its cases as they are, without failing
    (and the test above says so, if local constants are still drawn)."""
    original = providers._get_local_constants
    with monkeypatch.context() as older:
        older.setitem(sys.modules, "hypothesis.internal.constants_ast", None)  # import fails
        with without_local_constants():
            assert providers._get_local_constants is original
    monkeypatch.delattr(providers, "_get_local_constants")
    with without_local_constants():
        assert not hasattr(providers, "_get_local_constants")


def test_hypothesis_hashes_no_test_source_at_each_run(monkeypatch):
    """Suite.case gives each test hypothesis's private `_hypothesis_internal_database_key` (None: the
    grader keeps no database), so that hypothesis does not hash the test's source every time a case runs
    (function_digest). This fails when hypothesis stops reading that attribute, or renames the digest."""
    import hypothesis.core

    digests = []
    original = hypothesis.core.function_digest
    monkeypatch.setattr(hypothesis.core, "function_digest",
                        lambda test: digests.append(test) or original(test))
    suite = Suite("quiz", Visibility.HIDDEN)

    @suite.case(1.0)
    @given(value=st.integers(0, 10))
    def draws(student, value: int) -> None:
        pass

    assert run_case(suite.cases[0], GuardedStudent(_NoWorker()), salt="tests").status is Status.PASSED
    assert digests == []
