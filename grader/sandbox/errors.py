"""What a request to the sandbox can end in besides its value: the sandbox cannot run here, the student's
code raised, or the worker was lost (it crashed, hung or broke the protocol)."""
from ..results import safe_text
from .clocks import STALLED, Timeout


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here as asked: the message says why and what to do."""


class WorkerLost(RuntimeError):
    """The worker crashed, exited, hung past its deadline or broke the protocol.

    A timed-out worker `stalled` when the wall-clock backstop stopped it before its CPU limit (it was
    starved by a loaded machine, or the judge cannot tell); otherwise it used its CPU time, or slept.
    `function` and `where` say where the student's code was when its time ran out, if it said.
    """

    def __init__(self, reason: str, timeout: Timeout | None = None, function: str = "", where: str = ""):
        super().__init__(reason)
        self.timeout, self.function, self.where = timeout, function, where

    @property
    def timed_out(self) -> bool:
        return self.timeout is not None

    @property
    def stalled(self) -> bool:
        return self.timeout is STALLED


class StudentError(Exception):
    """The student's code raised: type, message and where in their files.

    file and line say which of their files it comes from: the deepest frame in the submission, the
    file a SyntaxError is in, or the submission module an import could not find ("" if none).
    """

    def __init__(self, type_name: str, message: str, where: str = "", file: str = "", line: int = 0):
        type_name, message, where, file = (safe_text(text, 1000)
                                           for text in (type_name, message, where, file))
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.where = type_name, message, where
        self.file, self.line = file, line

    def __str__(self) -> str:
        text = f"{self.type_name}: {self.message}" if self.message else self.type_name
        return f"{text} ({self.where})" if self.where else text
