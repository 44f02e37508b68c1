"""Grading one submission, as a function: `grade(submission, options) -> Scorecard`.

The command line (`grader grade`, `grader check`) and the class runner (grader/instructor/runner.py)
both call it, so a class graded in parallel or on a cluster gets exactly what `grader grade` gives.
"""
import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from .results import Result
from .scoring import Scorecard
from .spec import COMPONENTS


@dataclass(frozen=True, kw_only=True)
class GradeOptions:
    """How to grade: which components, which tests, how much time each test gets, and the seconds
    the whole grading must end within (a platform's limit: tests without time left are not run)."""

    components: tuple[str, ...] = COMPONENTS
    public_only: bool = False
    timeout_scale: float = 1.0
    """Multiplies every CPU time limit: what passes changes."""
    time_limit: float | None = None
    unsafe_no_sandbox: bool = False
    """Grade the hidden tests even where no sandbox runs ("plain" mode); the scorecard says so."""
    wall_scale: float = 1.0
    """Multiplies only the wall-clock backstops: more patience, the same grade for code that finishes."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        unknown = [name for name in self.components if name not in COMPONENTS]
        if unknown or not self.components:
            raise ValueError(f"--only: no component {', '.join(unknown) or '(none given)'} "
                             f"(components: {', '.join(COMPONENTS)})")
        for name in ("timeout_scale", "wall_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name):g}: a positive factor")
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError(f"--time-limit {self.time_limit:g}: a positive number of seconds")

    def to_json(self) -> dict:
        return {**asdict(self), "components": list(self.components)}

    @classmethod
    def from_json(cls, data: dict) -> "GradeOptions":
        return cls(**data)


def parse_components(text: str | None) -> tuple[str, ...]:
    """`--only A,B` as component names (all when not given); ValueError names an unknown one."""
    if not text:
        return COMPONENTS
    return GradeOptions(components=tuple(name.strip() for name in text.split(",") if name.strip())).components


def grade(submission: Path, options: GradeOptions = GradeOptions(),
          on_result: Callable[[Result], None] | None = None) -> Scorecard:
    """Grade a submission (a folder, a zip or a notebook) in a fresh sandbox; the scorecard says
    which sandbox mode it ran in.

    Raises SubmissionError when it cannot be read at all, HiddenTestsMissing when the hidden tests
    are asked for where they are not installed (a student release), SandboxUnavailable when the
    sandbox cannot run here as asked (or cannot keep the hidden tests hidden: sandbox_mode).
    """
    from .sandbox.affinity import one_cpu
    from .sandbox.client import Sandbox
    from .sandbox.modes import FORKED_MODES
    from .submission import unpack

    deadline = None if options.time_limit is None else time.monotonic() + options.time_limit
    with TemporaryDirectory(prefix="submission-") as scratch, TemporaryDirectory(prefix="grader-") as work:
        directory = unpack(Path(submission), Path(scratch))
        sandbox = Sandbox(directory, Path(work), options.timeout_scale, hidden=not options.public_only,
                          unsafe_no_sandbox=options.unsafe_no_sandbox)
        try:
            if sandbox.mode not in FORKED_MODES:  # a worker of its own, whose torch import overlaps ours
                sandbox.start()
            from .judge import judge
            from .scoring import scorecard

            with one_cpu():  # the judge and its workers take turns: on one CPU (sandbox/affinity.py)
                sandbox.start()  # its template forked from here: torch is imported, nothing hidden yet
                if not gc.get_freeze_count():  # once a process, before any grading's garbage: torch's
                    gc.freeze()  # objects, which live as long as the process, out of every full collection

                card = scorecard(judge(directory, public_only=options.public_only,
                                       components=options.components, timeout_scale=options.timeout_scale,
                                       wall_scale=options.wall_scale, on_result=on_result, sandbox=sandbox,
                                       deadline=deadline))
        finally:  # the judge closes it too: this is for an interruption (Ctrl-C) before the judge runs
            sandbox.close()
        card.sandbox = sandbox.isolation()
        return card
