"""The grader's vocabulary, defined once: components, the contract's option values, defaults,
visibility, test statuses and the tolerances comparisons use (docs/spec.md says why each)."""
from enum import StrEnum
from typing import Any, NamedTuple

COMPONENTS = ("attention", "positional", "feedforward", "block", "model", "trainer", "analysis", "quiz")
DEPENDS = {
    "attention": ("positional",),
    "block": ("attention", "feedforward"),
    "model": ("attention", "block", "positional", "trainer"),
    "analysis": ("model",),
}
"""What each component's tests also run of the student's code (for the 'fix X first' notes)."""
COMPONENT_POINTS = {"attention": 20, "positional": 15, "feedforward": 8, "block": 14, "model": 15,
                    "trainer": 15, "analysis": 8, "quiz": 5}
"""Each component's share of the grade (public and hidden tests together; 100 in all)."""

POS_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")
NORMS = ("pre", "post")
ACTIVATIONS = ("gelu", "relu")
IGNORE_INDEX = -100
"""Targets equal to this are not scored (docs/spec.md, trainer.py)."""

MODEL_DEFAULTS = {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 256, "max_len": 128, "dropout": 0.0,
                  "norm": "pre", "pos_encoding": "sinusoidal", "activation": "gelu"}
"""TinyTransformerLM's defaults (docs/spec.md (M1)); tests/grader/test_spec_facts.py checks them against
the reference's signature."""


class Visibility(StrEnum):
    """Who runs a test: `grader check` runs the public ones, `grader grade` both."""

    PUBLIC = "public"
    HIDDEN = "hidden"


class Status(StrEnum):
    """How one test ended; only PASSED scores."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_ATTEMPTED = "not_attempted"
    TIMED_OUT = "timed_out"
    CRASHED = "crashed"
    ERROR = "error"


class Tolerance(NamedTuple):
    atol: float
    rtol: float


class _ByDtype(dict):
    """Keyed by dtype name, looked up by a torch dtype (so this module needs no torch)."""

    def __getitem__(self, dtype: Any) -> Tolerance:
        return super().__getitem__(str(dtype).removeprefix("torch."))


TOLERANCES = _ByDtype(
    float32=Tolerance(atol=1e-5, rtol=1e-4),  # float32 rounding through a few matmuls and a softmax
    float64=Tolerance(atol=1e-6, rtol=1e-5),  # any correct order of operations lands far inside this
)
"""Values compared with the reference, by the dtype the test computes in: TOLERANCES[torch.float32]."""
GRADIENT_TOLERANCE = Tolerance(atol=1e-8, rtol=1e-6)
"""Gradients, always compared in float64."""
FLOAT32_TABLE_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-5)
"""Where a float32 table enters a float64 computation (the sinusoidal table P1 is float32 by contract)."""
EXACT = Tolerance(atol=1e-12, rtol=1e-12)
"""Two runs of the student's own code that must agree (dropout off in eval mode)."""
