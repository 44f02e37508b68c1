"""The trusted side: run every case against a submission in the sandbox, fail closed.

Data flows one way: the judge draws inputs, the worker runs the student's code on them, the
judge compares and scores. A case passes only if it ran to the end without an exception;
anything else (a failed property, the student's exception, a crash, a timeout, a bug in the
grader) scores 0 for that case alone.
"""
import importlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from .reference import ref
from .sandbox.client import Sandbox, StudentError, WorkerLost
from .sandbox.worker import SLOW_IMPORT
from .student import Student
from .suites import COMPONENTS, Case, all_cases
from .suites.checks import Failed

PASSED, FAILED, NOT_ATTEMPTED, TIMED_OUT, CRASHED, ERROR = (
    "passed", "failed", "not_attempted", "timed_out", "crashed", "error")
SUBMISSION_SECONDS = 300.0


@dataclass
class Result:
    name: str
    component: str
    score: float
    max_score: float
    status: str
    message: str


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


def _example(error: BaseException) -> str:
    """Hypothesis's (shrunk) falsifying example, as `n=3, dtype=torch.float64`."""
    for note in getattr(error, "__notes__", []):
        if note.startswith(("Falsifying", "Failing")):  # "Falsifying example", "Failing test case", ...
            lines = [line.split("#")[0].strip().rstrip(",") for line in note.splitlines()[1:-1]]
            drawn = [line for line in lines if line and not line.startswith("student=")]
            return ", ".join(drawn)
    return ""


@contextmanager
def _recording_failures(test: Callable, seen: list[BaseException]) -> Iterator[None]:
    """Keep the first exception of a hypothesis test's examples in `seen`, while it runs."""
    hypothesis = getattr(test, "hypothesis", None)
    if hypothesis is None:
        yield
        return
    inner = hypothesis.inner_test

    def recorded(*args: object, **kwargs: object) -> object:
        try:
            return inner(*args, **kwargs)
        except BaseException as error:
            if not seen:
                seen.append(error)
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

    def result(status: str, message: str = "") -> Result:
        return Result(case.name, case.component, case.points if status == PASSED else 0.0,
                      case.points, status, message)

    first_failure: list[BaseException] = []
    try:
        student.sandbox.ready()
        student.deadline = time.monotonic() + limit  # the clock starts once a worker is ready
        with _recording_failures(case.run, first_failure):
            case.run(student)
    except BaseException as raised:  # noqa: BLE001 - fail closed on anything
        error = _unwrap(raised)
        example = _example(raised) or _example(error)
        if isinstance(error, OutOfTime):
            if not first_failure or isinstance(first_failure[0], OutOfTime):
                return result(TIMED_OUT, f"{case.doc}: ran past the test's time limit of {limit:g} s (far too slow?)")
            error, example = first_failure[0], ""  # shrinking ran out of time: report what failed first
        on = f" [input: {example}]" if example else ""
        if isinstance(error, KeyboardInterrupt):
            raise
        if isinstance(error, Failed):
            return result(FAILED, f"{case.doc}: {error}{on}")
        if isinstance(error, StudentError):
            if error.type_name == "NotImplementedError":
                return result(NOT_ATTEMPTED, f"not attempted: {error.message}")
            return result(FAILED, f"{case.doc}: your code raised {error}{on}")
        if isinstance(error, WorkerLost):  # no input shown: replays after a loss fail at once
            if error.timed_out:
                return result(TIMED_OUT, f"{case.doc}: no answer within the test's time limit of "
                                         f"{limit:g} s (an infinite loop, or far too slow?)")
            return result(CRASHED, f"{case.doc}: {error}")
        return result(ERROR, f"{case.doc}: the grader could not run this test ({type(error).__name__}: {error})")
    finally:
        if student.lost is None:
            try:
                student.reset()
            except Exception:  # noqa: BLE001 - a broken worker shows in the next case, not here
                pass
    return result(PASSED)


def judge(submission_dir: Path, *, public_only: bool = False, components: tuple[str, ...] = COMPONENTS,
          budget: float = SUBMISSION_SECONDS, timeout_scale: float = 1.0,
          on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the cases of `components` (all, or the public ones) against the submission.

    Each case's time limit is multiplied by timeout_scale (raise it on a slow machine); past
    `budget` seconds in all, the remaining cases are not run and score 0 (timed out).
    """
    ref.available = not public_only
    # One thread: tiny tensors gain nothing from more, and the worker needs the other core.
    torch.set_num_threads(1)
    threading.Thread(target=importlib.import_module, args=(SLOW_IMPORT,), daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="grader-") as scratch:
        sandbox = Sandbox(submission_dir, Path(scratch))
        sandbox.start()  # its imports overlap with ours
        student = GuardedStudent(sandbox)
        results = []
        try:
            stop = time.monotonic() + budget
            for case in all_cases(public_only, components):
                if time.monotonic() < stop:
                    results.append(run_case(case, student, timeout_scale))
                else:
                    results.append(Result(case.name, case.component, 0.0, case.points, TIMED_OUT,
                                          f"{case.doc}: not run, the submission used up its {budget:.0f} s"))
                if on_result:
                    on_result(results[-1])
        finally:
            sandbox.close()
    return results
