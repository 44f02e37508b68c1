"""The hidden suites: comparisons with the reference solutions, diagnoses of classic mistakes
and reference-verified convergence. Never part of the student release."""
import importlib.util

from .. import HiddenTestsMissing

if importlib.util.find_spec("solutions") is None:
    raise HiddenTestsMissing("the reference solutions (the `solutions` package) are not installed, so the "
                             "hidden tests cannot run: refusing to grade")
