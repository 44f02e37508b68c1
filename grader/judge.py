"""The trusted side: run every case against a submission in the sandbox, fail closed.

Data flows one way: the judge draws inputs, the worker runs the student's code on them, the
judge compares and scores. A case passes only if it ran to the end without an exception;
anything else (a failed property, the student's exception, a crash, a timeout, a bug in the
grader) scores 0 for that case alone.
"""
import importlib
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .results import Result
from .sandbox.client import Sandbox, StudentError, WorkerLost
from .sandbox.protocol import SLOW_IMPORT
from .spec import COMPONENTS, Status
from .student import Student
from .suites import Case, all_cases
from .suites.checks import Failed

SUBMISSION_SECONDS = 300.0


class OutOfTime(RuntimeError):
    """The case ran past its time limit between calls (hypothesis still drawing or shrinking)."""


class GuardedStudent(Student):
    """A Student that, once its worker is lost within a case, fails every further call at once,
    so that hypothesis's replays do not hang or restart the worker again and again; and that
    refuses new calls once the case is out of time."""

    lost: WorkerLost | None = None

    def request(self, message: dict) -> dict:
        if self.lost is not None:
            raise self.lost
        if time.monotonic() > self.deadline and message.get("op") != "reset":
            raise OutOfTime()
        try:
            return super().request(message)
        except WorkerLost as error:
            self.lost = error
            raise


@dataclass
class FailingCalls:
    """Each failing call of a hypothesis test: its exception and the arguments it was drawn."""

    calls: list[tuple[BaseException, dict]] = field(default_factory=list)

    def first(self) -> BaseException | None:
        return self.calls[0][0] if self.calls else None

    def input_of(self, error: BaseException) -> str:
        """The arguments of the call that raised `error`, as `n=3, dtype=torch.float64`."""
        for raised, kwargs in reversed(self.calls):
            if raised is error:
                return ", ".join(f"{name}={value!r}" for name, value in kwargs.items())
        return ""


@contextmanager
def _recording(test: Callable, failing: FailingCalls) -> Iterator[None]:
    """Record every failing call of a hypothesis test in `failing`, while it runs."""
    hypothesis = getattr(test, "hypothesis", None)
    if hypothesis is None:
        yield
        return
    inner = hypothesis.inner_test

    def recorded(*args: object, **kwargs: object) -> object:
        try:
            return inner(*args, **kwargs)
        except BaseException as error:
            failing.calls.append((error, {k: v for k, v in kwargs.items() if k != "student"}))
            raise

    hypothesis.inner_test = recorded
    try:
        yield
    finally:
        hypothesis.inner_test = inner


def _unwrap(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def run_case(case: Case, student: GuardedStudent, timeout_scale: float = 1.0) -> Result:
    """Run one case (its time limit multiplied by timeout_scale); its result, whatever happens."""
    torch.manual_seed(0)
    student.lost = None
    limit = case.timeout * timeout_scale
    student.deadline = time.monotonic() + limit

    def result(status: Status, message: str = "") -> Result:
        return Result(case.name, case.component, case.points if status is Status.PASSED else 0.0,
                      case.points, status, message)

    failing = FailingCalls()
    try:
        student.sandbox.ready()
        student.deadline = time.monotonic() + limit  # the clock starts once a worker is ready
        with _recording(case.run, failing):
            case.run(student)
    except BaseException as raised:  # noqa: BLE001 - fail closed on anything
        error = _unwrap(raised)
        if isinstance(error, KeyboardInterrupt):
            raise
        if isinstance(error, OutOfTime):
            first = failing.first()
            if first is None or isinstance(first, OutOfTime):
                return result(Status.TIMED_OUT,
                              f"{case.doc}: ran past the test's time limit of {limit:g} s (far too slow?)")
            error = first  # shrinking ran out of time: report what failed first
        example = failing.input_of(error)
        on = f" [input: {example}]" if example else ""
        if isinstance(error, Failed):
            return result(Status.FAILED, f"{case.doc}: {error}{on}")
        if isinstance(error, StudentError):
            if error.type_name == "NotImplementedError":
                return result(Status.NOT_ATTEMPTED, f"not attempted: {error.message}")
            return result(Status.FAILED, f"{case.doc}: your code raised {error}{on}")
        if isinstance(error, WorkerLost):  # no input shown: replays after a loss fail at once
            if error.timed_out:
                return result(Status.TIMED_OUT, f"{case.doc}: no answer within the test's time limit of "
                                                f"{limit:g} s (an infinite loop, or far too slow?)")
            return result(Status.CRASHED, f"{case.doc}: {error}")
        return result(Status.ERROR,
                      f"{case.doc}: the grader could not run this test ({type(error).__name__}: {error})")
    finally:
        if student.lost is None:
            try:
                student.reset()
            except Exception:  # noqa: BLE001 - a broken worker shows in the next case, not here
                pass
    return result(Status.PASSED)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Tiny tensors gain nothing from more threads, and the worker needs the other core."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def judge(submission_dir: Path, *, public_only: bool = False, components: tuple[str, ...] = COMPONENTS,
          budget: float = SUBMISSION_SECONDS, timeout_scale: float = 1.0,
          on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the cases of `components` (all, or the public ones) against the submission.

    Each case's time limit is multiplied by timeout_scale (raise it on a slow machine); past
    `budget` seconds in all, the remaining cases are not run and score 0 (timed out).
    """
    cases = all_cases(public_only, components)
    with _one_thread(), tempfile.TemporaryDirectory(prefix="grader-") as scratch:
        sandbox = Sandbox(submission_dir, Path(scratch))
        sandbox.start()  # its imports overlap with ours
        # Joined before any case runs: hypothesis parses test sources with `ast`, which on
        # CPython 3.11 can fail (SystemError) while another thread imports.
        importlib.import_module(SLOW_IMPORT)
        student = GuardedStudent(sandbox)
        results = []
        try:
            stop = time.monotonic() + budget
            for case in cases:
                if time.monotonic() < stop:
                    results.append(run_case(case, student, timeout_scale))
                else:
                    results.append(Result(case.name, case.component, 0.0, case.points, Status.TIMED_OUT,
                                          f"{case.doc}: not run, the submission used up its {budget:.0f} s"))
                if on_result:
                    on_result(results[-1])
        finally:
            sandbox.close()
    return results
