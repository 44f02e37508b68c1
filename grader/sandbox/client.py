"""The judge's side of the sandbox: start, call, time out and replace worker processes.

Each worker is a fresh interpreter (not a fork of the judge, which holds the reference), in a
new session so that its whole process group can be killed, with its output going to a capped
log file rather than to the judge. A crash, exit, hang or oversized reply costs the call that
caused it (WorkerLost); the next call starts a new worker.
"""
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .protocol import Deadline, ProtocolError, receive, send

STARTUP_SECONDS = 60.0
LOG_BYTES = 8 * 1024 * 1024
_GRADER_PARENT = Path(__file__).resolve().parents[2]


class WorkerLost(RuntimeError):
    """The worker crashed, exited, hung past its deadline or broke the protocol."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.timed_out = timed_out


class StudentError(Exception):
    """The student's code raised: type, message and where in their files.

    file and line say which of their files it comes from: the deepest frame in the submission, the
    file a SyntaxError is in, or the submission module an import could not find ("" if none).
    """

    def __init__(self, type_name: str, message: str, where: str = "", file: str = "", line: int = 0):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.where = type_name, message, where
        self.file, self.line = file, line

    def __str__(self) -> str:
        text = f"{self.type_name}: {self.message}" if self.message else self.type_name
        return f"{text} ({self.where})" if self.where else text


def _limit_child() -> None:
    # A print flood fills a capped file and then fails its own write; it cannot fill the disk.
    resource.setrlimit(resource.RLIMIT_FSIZE, (LOG_BYTES, LOG_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class Worker:
    """One worker process serving one submission directory (never importing its `blocked` modules)."""

    def __init__(self, submission_dir: Path, scratch: Path, blocked: frozenset[str] = frozenset()):
        request_read, self._request = os.pipe()
        self._reply, reply_write = os.pipe()
        log_fd, log_name = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=scratch)
        os.close(log_fd)
        self.log_path = Path(log_name)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(scratch),
            "PYTHONPATH": str(_GRADER_PARENT),
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grader.sandbox.worker", str(request_read), str(reply_write),
                 str(Path(submission_dir).resolve()), ",".join(sorted(blocked))],
                pass_fds=(request_read, reply_write), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=scratch, env=env, start_new_session=True,
                preexec_fn=_limit_child,
            )
        os.close(request_read)
        os.close(reply_write)
        self._ready = False

    def request(self, message: dict, timeout: float) -> Any:
        """Send one request and return its reply's "ok" value; StudentError or WorkerLost otherwise."""
        try:
            self.wait_ready()  # start-up is not charged to the call
            send(self._request, message)
            reply = receive(self._reply, time.monotonic() + timeout)
        except Deadline:
            self.close()
            raise WorkerLost(f"timed out after {timeout:.0f} s (an infinite loop, or far too slow?)",
                             timed_out=True) from None
        except (EOFError, OSError, ProtocolError) as error:
            self.close()
            raise WorkerLost(self._death_reason(error)) from None
        if "error" in reply:
            error = reply["error"]
            raise StudentError(str(error.get("type")), str(error.get("message")), str(error.get("where")),
                               str(error.get("file", "")), int(error.get("line") or 0))
        return reply["ok"]

    def wait_ready(self) -> None:
        """Block until the worker has imported what it needs (its first message)."""
        if not self._ready:
            receive(self._reply, time.monotonic() + STARTUP_SECONDS)
            self._ready = True

    def _death_reason(self, error: BaseException) -> str:
        code = self.process.returncode
        if isinstance(error, ProtocolError):
            return f"the worker's reply was refused: {error}"
        if code is not None and code < 0:
            return f"the process was killed by signal {signal.Signals(-code).name}"
        if code is not None:
            return f"the process exited with code {code} (os._exit or a crash)"
        return "the process stopped answering"

    def close(self) -> None:
        """Kill the worker's whole process group and wait for it."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        for fd in (self._request, self._reply):
            try:
                os.close(fd)
            except OSError:
                pass
        self._request = self._reply = -1


class Sandbox:
    """A worker for one submission, replaced whenever one is lost."""

    def __init__(self, submission_dir: Path, scratch: Path):
        self.submission_dir, self.scratch = Path(submission_dir), Path(scratch)
        self.worker: Worker | None = None
        self.blocked: frozenset[str] = frozenset()

    def start(self) -> None:
        """Start a worker now, so that its imports overlap the judge's own work."""
        if self.worker is None:
            self.worker = Worker(self.submission_dir, self.scratch, self.blocked)

    def block(self, module: str) -> None:
        """Never import this submission module again: importing it fails at once, in a new worker
        (it may have hung or flooded; the worker that tried it may hold half of it)."""
        self.blocked |= {module}
        self.close()

    def ready(self) -> None:
        """Start a worker if none is running and wait until it can take calls."""
        self.start()
        try:
            self.worker.wait_ready()
        except (Deadline, EOFError, OSError, ProtocolError) as error:
            self.close()
            raise WorkerLost(f"the worker could not start: {error}") from None

    def request(self, message: dict, timeout: float) -> Any:
        self.start()
        worker = self.worker
        try:
            return worker.request(message, timeout)
        except WorkerLost:
            self.worker = None
            raise

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
