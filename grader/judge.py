"""The trusted side: run every case against a submission in the sandbox, fail closed.

Data flows one way: the judge draws inputs, the worker runs the student's code on them, the
judge compares and scores. A case passes only if it ran to the end without an exception;
anything else (a failed property, the student's exception, a crash, a timeout, a bug in the
grader) scores 0 for that case alone.

Before any case, the judge imports each submission file the cases need, once and under a short
time limit: a file that cannot be imported (missing, a SyntaxError, a hang, a flood of prints)
gives every case of its component, and of the components that import it, the same one-line
message at once, and is never imported again.

Time limits count the worker's CPU seconds (the judge's own work, drawing inputs and running the
reference, is not charged), with a wall-clock backstop several times longer (sandbox/clocks.py): a
loaded machine does not change a grade. Once a function of the student's has run out of time, every
later call that reaches it fails at once ("blocked"), instead of waiting for it again.
"""
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from pathlib import Path
from typing import NamedTuple

import torch

from .results import Failed, Result
from .salt import grading_salt
from .sandbox.client import Sandbox
from .sandbox.clocks import ASLEEP, SEES_STARVATION, STALLED, OutOfTime
from .sandbox.errors import StudentError, WorkerLost
from .sandbox.worker import eager
from .sandbox.worker.forbidden import static_problem
from .sandbox.worker.messages import BLOCKED, TOO_MUCH_OUTPUT, Op
from .scoring import runs, waiting_for
from .spec import BUDGETS, COMPONENTS, DEPENDS, IMPORTED_BY, NOT_RUN, Status
from .stubs import stub_name
from .student import Student
from .submission import replaced_cells
from .suites import Case, all_cases, without_local_constants
from .suites.fallback import observing


class Unimportable(NamedTuple):
    """A submission file that could not be imported: what its component's cases score, and why."""

    status: Status
    message: str


class CaseOver(BaseException):
    """A call reached a stub or a file that cannot be imported: no example can pass, so the case
    stops now. A BaseException, so that hypothesis neither shrinks nor replays it."""

    def __init__(self, error: StudentError):
        super().__init__(str(error))
        self.error = error


class GuardedStudent(Student):
    """A Student that, once its worker is lost within a case, fails every further call at once,
    so that hypothesis's replays do not hang or restart the worker again and again; that ends the
    case at the first stub, unimportable file or function found hanging it reaches (CaseOver); and
    that refuses new calls once the case is out of time."""

    lost: WorkerLost | None = None
    over: CaseOver | None = None

    def __init__(self, sandbox: Sandbox):
        super().__init__(sandbox)
        self.broken: dict[str, Unimportable] = {}
        self.hangs: dict[str, str] = {}
        """Each function that ran out of time ("feedforward.FeedForward.forward"): when, and where."""

    def _admit(self) -> None:
        if self.lost is not None:
            raise self.lost
        if self.over is not None:
            raise self.over
        if self.allowance is not None and (spent := self.sandbox.spent(self.allowance)):
            raise OutOfTime(spent)

    def request(self, message: dict) -> dict:
        self._admit()
        try:
            return super().request(message)
        except WorkerLost as error:
            self.lost = error
            raise
        except StudentError as error:
            if error.type_name in ("NotImplementedError", BLOCKED) or _module(error) in self.broken:
                self.over = CaseOver(error)
                raise self.over from None
            raise


def _module(error: StudentError) -> str:
    """The submission module the student's error comes from ("" if none)."""
    return error.file.removesuffix(".py")


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


def _not_attempted(case: Case, error: StudentError) -> str:
    """A stub's NotImplementedError: the case's own, or another component's it is waiting for."""
    module = _module(error)
    if not module or module == case.component:
        return _not_attempted_message(error)
    function = stub_name(error.message) or error.where.rpartition(" in ")[2]
    return waiting_for(f"{module}.{function}")


def _not_attempted_message(error: StudentError) -> str:
    """What a stub of the case's own component says; where its NotImplementedError has no message, where."""
    return f"not attempted: {error.message or f'NotImplementedError raised ({error.where})'}"


def _replaced_by_a_later_cell(case: Case, student: GuardedStudent, status: Status, message: str) -> str:
    """A notebook's file that a later `%%writefile` cell replaced, where a test finds a stub or a name of the
    contract missing: the same line for each such test (the report says it once), naming the cell graded."""
    file = f"{case.component}.py"
    missing = f"module '{case.component}' has no attribute" in message
    if not (missing or message.startswith("not attempted:")):
        return message
    if (cells := replaced_cells(student.sandbox.submission_dir, file)) is None:
        return message
    graded, earlier = cells
    return (f"{file} is what cell {graded} of your notebook writes: a `%%writefile {file}` cell replaces the "
            f"whole file, so what cell{'s' if len(earlier) > 1 else ''} {', '.join(map(str, earlier))} wrote "
            f"is not graded, and cell {graded}'s {file} "
            + ("lacks names the tests call" if missing else "is still a stub")
            + f" (to add to a file, start the cell with `%%writefile -a {file}`)")


def _out_of_time(case: Case, student: GuardedStudent, error: WorkerLost | OutOfTime, limit: float,
                 wall_scale: float) -> tuple[Status, str]:
    """A case that ran out of time: STALLED where the backstop stopped a worker starved of CPU (the
    machine's doing, not a verdict), else TIMED_OUT; a function it hung in is refused from now on."""
    at = f" in {error.where}" if getattr(error, "where", "") else ""
    backstop = limit * BUDGETS.wall_factor * wall_scale
    if error.timeout == STALLED:
        return Status.STALLED, (f"{case.doc}: no answer within {backstop:g} s of wall-clock time before it "
                                f"used its {limit:g} s of CPU time: the machine was too loaded to tell "
                                "(not a verdict on your code: it will be graded again)")
    function = getattr(error, "function", "")
    if function and function not in student.hangs:
        seconds = backstop if error.timeout == ASLEEP else limit
        student.hangs[function] = f"did not return within {seconds:g} s (see {case.component}.{case.name})"
        student.sandbox.refuse(function, function)
    if error.timeout == ASLEEP:
        return Status.TIMED_OUT, (f"{case.doc}: no answer within {backstop:g} s of wall-clock time, while "
                                  f"your code hardly computed{at}: does it sleep, or wait for input, a lock "
                                  "or another process?")
    return Status.TIMED_OUT, (f"{case.doc}: used up the test's CPU time limit of {limit:g} s{at} (an "
                              "infinite loop, or far too slow?)")


def _blocked(case: Case, student: GuardedStudent, function: str) -> str:
    """The message of a case that called a function found hanging earlier (see _out_of_time): the same
    for every such case of a component, so that the report says it once."""
    module, _, name = function.partition(".")
    by = "" if module == case.component else f" by {module} (it hangs)"
    return f"blocked{by}: {name} ({module}.py) {student.hangs.get(function, 'hangs')}"


def run_case(case: Case, student: GuardedStudent, timeout_scale: float = 1.0,
             salt: str | None = None, wall_scale: float = 1.0) -> Result:
    """Run one case (its CPU time limit multiplied by timeout_scale, its wall-clock backstop by
    wall_scale too, its examples seeded from `salt`, by default the grading's); its result, whatever
    happens."""

    def result(status: Status, message: str = "") -> Result:
        return Result(case.name, case.component, case.points if status is Status.PASSED else 0.0,
                      case.points, status, _replaced_by_a_later_cell(case, student, status, message),
                      case.visibility)

    if case.component in student.broken:  # its file cannot be imported: said once, not run
        return result(*student.broken[case.component])
    eager.manual_seed(case.seed_examples(grading_salt(case.public) if salt is None else salt))
    student.lost = student.over = student.allowance = None
    limit = case.timeout * timeout_scale
    failing = FailingCalls()
    try:
        student.sandbox.ready()
        student.allowance = student.sandbox.allowance(limit, wall_scale)  # once a worker is ready
        with _recording(case.run, failing), without_local_constants():
            case.run(student)
    except BaseException as raised:  # noqa: BLE001 - fail closed on anything
        error = _unwrap(raised)
        if isinstance(error, KeyboardInterrupt):
            raise
        if isinstance(error, CaseOver):
            error = error.error
        if isinstance(error, OutOfTime):
            first = failing.first()
            if first is None or isinstance(first, OutOfTime):
                return result(*_out_of_time(case, student, error, limit, wall_scale))
            error = first  # shrinking ran out of time: report what failed first
        example = failing.input_of(error)
        on = f" [input: {example}]" if example else ""
        if isinstance(error, Failed):
            return result(Status.FAILED, f"{case.doc}: {error}{on}")
        if isinstance(error, StudentError):
            if _module(error) in student.broken:
                return result(*student.broken[_module(error)])
            if error.type_name == "NotImplementedError":
                return result(Status.NOT_ATTEMPTED, _not_attempted(case, error))
            if error.type_name == BLOCKED:
                return result(Status.TIMED_OUT, _blocked(case, student, error.message))
            if error.type_name == TOO_MUCH_OUTPUT:  # the same line for every test it costs
                return result(Status.FAILED, f"{error.message} ({error.where})")
            return result(Status.FAILED, f"{case.doc}: your code raised {error}{on}")
        if isinstance(error, WorkerLost):  # no input shown: replays after a loss fail at once
            if error.timed_out:
                return result(*_out_of_time(case, student, error, limit, wall_scale))
            return result(Status.CRASHED, f"{case.doc}: {error}")
        return result(Status.ERROR,
                      f"{case.doc}: the grader could not run this test ({type(error).__name__}: {error})")
    finally:
        student.allowance = None
        if student.lost is None:
            try:
                student.reset()
            except Exception:  # noqa: BLE001 - a broken worker shows in the next case, not here
                pass
    return result(Status.PASSED)


def import_order(components: tuple[str, ...]) -> list[str]:
    """The submission modules the cases of `components` run (DEPENDS), each after those it builds on."""
    needed = set(components).union(*map(runs, components))
    graph = {name: DEPENDS.get(name, ()) for name in COMPONENTS}
    return [name for name in TopologicalSorter(graph).static_order() if name in needed]


def _blamed(error: StudentError, module: str) -> str:
    """The submission module an import of `module` failed in: the one whose own top-level code raised
    (or that is missing, or has a SyntaxError), else `module` (its top-level code called a function
    that raised)."""
    in_function = " in " in error.where and not error.where.endswith(" in <module>")
    return module if in_function or not error.file.endswith(".py") else _module(error)


def _import_problem(error: StudentError, file: str, submission_dir: Path) -> str:
    """One line for the file an import failed in: missing, or the error and its line."""
    if not (submission_dir / file).is_file():
        return f"{file} is missing"
    if error.file != file:
        return f"{file}: importing it raised {error}"
    if error.type_name == TOO_MUCH_OUTPUT:
        return f"{file}: {error.message}"
    at = f" at line {error.line}" if error.line else ""
    return f"{file}: {error.type_name}{at}: {error.message}"


def import_modules(student: GuardedStudent, modules: list[str], timeout_scale: float = 1.0,
                   wall_scale: float = 1.0) -> None:
    """Import each module once, in order, under a short CPU time limit; those that fail go into
    student.broken (with the file at fault named), and that file is blocked in every later worker."""
    limit = BUDGETS.scaled(timeout_scale).file_import
    sandbox, broken = student.sandbox, student.broken
    for module in modules:
        if module not in broken and (problem := _forbidden_in(sandbox.submission_dir / f"{module}.py")):
            broken[module] = Unimportable(Status.FAILED, f"{module}.py, {problem}")
            sandbox.block(module)
            continue
        try:
            sandbox.ready()
        except WorkerLost:
            return  # no worker at all: every case will say so
        try:
            sandbox.request({"op": Op.IMPORT, "module": module}, sandbox.allowance(limit, wall_scale))
        except StudentError as error:
            origin = _blamed(error, module)
            if origin not in broken:
                problem = _import_problem(error, f"{origin}.py", sandbox.submission_dir)
                broken[origin] = Unimportable(Status.FAILED, problem)
                sandbox.block(origin)
            if origin != module:  # e.g. attention.py, which imports a broken positional.py
                status, problem = broken[origin]
                broken[module] = Unimportable(status, IMPORTED_BY.format(problem=problem, module=module))
        except WorkerLost as error:
            if error.stalled:
                backstop = limit * BUDGETS.wall_factor * wall_scale
                broken[module] = Unimportable(
                    Status.STALLED, f"importing {module}.py: no answer within {backstop:g} s of wall-clock "
                                    "time: the machine was too loaded to tell (grade it again)")
            elif error.timed_out:
                broken[module] = Unimportable(
                    Status.TIMED_OUT, f"importing {module}.py did not finish within {limit:g} s of CPU time "
                                      "(an infinite loop at import time?)")
            else:
                broken[module] = Unimportable(Status.CRASHED, f"importing {module}.py stopped the worker: "
                                                              f"{error}")
            sandbox.block(module)


def _forbidden_in(path: Path) -> str:
    """What docs/spec.md forbids that this submission file names ("" if nothing, or no such file)."""
    try:
        return static_problem(path.read_text(errors="replace"))
    except OSError:
        return ""


def component_budgets(cases: list[Case], seconds: float) -> dict[str, float]:
    """Each component's share of `seconds` (of CPU), in proportion to its cases' time limits."""
    limits: Counter[str] = Counter()
    for case in cases:
        limits[case.component] += case.timeout
    whole = sum(limits.values()) or 1.0
    return {name: seconds * limit / whole for name, limit in limits.items()}


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
          budget: float = BUDGETS.submission, timeout_scale: float = 1.0, wall_scale: float = 1.0,
          on_result: Callable[[Result], None] | None = None, sandbox: Sandbox | None = None,
          deadline: float | None = None) -> list[Result]:
    """Run the cases of `components` (all, or the public ones) against the submission.

    Each case's CPU time limit is multiplied by timeout_scale (raise it for a far slower CPU), and so
    is `budget`, the CPU seconds the submission's cases may take in all; wall_scale multiplies the
    wall-clock backstops only (more patience on an overloaded machine: no grade of code that finishes
    changes). The budget is shared out among the components (component_budgets): past its share, a
    component's remaining cases are not run and score 0 (timed out), and a hang in one component costs
    no other any time. `deadline` (a time.monotonic() value: a platform's time limit) bounds the whole
    grading: the budget is shared out of the time left before it, and a case whose time limit would
    end past it is not run (NOT_RUN, timed out), so that the judge ends before it. `sandbox`
    is this submission's, if the caller started it already (grading.grade does); the judge closes it.
    """
    with _one_thread(), without_local_constants(), observing(components) as seen, \
            tempfile.TemporaryDirectory(prefix="grader-") as scratch:
        sandbox = sandbox or Sandbox(submission_dir, Path(scratch), timeout_scale, hidden=not public_only)
        try:
            sandbox.start()  # before the salt and the hidden tests are read: its template may be forked
            salt = grading_salt(public_only)  # once per grading, before any case
            cases = all_cases(public_only, components)
            eager.install()  # hidden cases run the reference's optimizers
            student = GuardedStudent(sandbox)
            import_modules(student, import_order(components), timeout_scale, wall_scale)
            total = budget * timeout_scale
            budgets = component_budgets(cases, total if deadline is None
                                        else min(total, deadline - time.monotonic()))
            cpu: Counter[str] = Counter()
            waited: Counter[str] = Counter()
            results: dict[int, Result] = {}
            for index in _phases(cases, sandbox):
                case = cases[index]
                name, share = case.component, budgets[case.component]
                seen.component = name  # the fallback dtype reads its dependencies' verdicts (fallback.Seen)
                if deadline is not None and time.monotonic() + case.timeout * timeout_scale > deadline:
                    results[index] = Result(case.name, name, 0.0, case.points, Status.TIMED_OUT,
                                            f"{NOT_RUN}: {case.doc}: the grading's time ran out before it",
                                            case.visibility)
                elif cpu[name] < share and waited[name] < share * BUDGETS.wall_factor * wall_scale:
                    cpu_before, waited_before = sandbox.cpu_seconds(), sandbox.waited
                    results[index] = run_case(case, student, timeout_scale, salt, wall_scale)
                    cpu[name] += sandbox.cpu_seconds() - cpu_before
                    waited[name] += sandbox.waited - waited_before
                elif cpu[name] >= share:
                    results[index] = Result(case.name, name, 0.0, case.points, Status.TIMED_OUT,
                                            f"{case.doc}: not run, the tests of {name} used up their "
                                            f"{share:.0f} s of CPU time (a hang, or far too slow code?)",
                                            case.visibility)
                else:  # its tests waited for the worker while it slept (or, unseen, was starved of CPU)
                    backstop = share * BUDGETS.wall_factor * wall_scale
                    status = Status.TIMED_OUT if SEES_STARVATION else Status.STALLED
                    results[index] = Result(case.name, name, 0.0, case.points, status,
                                            f"{case.doc}: not run, the tests of {name} waited past their "
                                            f"{backstop:.0f} s of wall-clock time (code that sleeps or "
                                            "waits?)", case.visibility)
                seen.saw(results[index], float64=case.float64)
                if on_result:
                    on_result(results[index])
        finally:
            sandbox.close()
    return [results[index] for index in range(len(cases))]


def _phases(cases: list[Case], sandbox: Sandbox) -> Iterator[int]:
    """The cases' indices, every public case first, then the hidden ones in workers of their own.

    A worker of the public phase never receives a hidden request, and every public result and
    message is settled before a hidden case starts: whatever the student's code learns of the
    hidden inputs (or of which hidden cases pass) it cannot show in a public test's message. The
    hidden phase starts with a fresh worker.
    """
    yield from (index for index, case in enumerate(cases) if case.public)
    hidden = [index for index, case in enumerate(cases) if not case.public]
    if hidden:
        sandbox.fresh_worker()
    yield from hidden
