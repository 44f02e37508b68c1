"""Grading many submissions at once: each one `grader grade`, run by a judge process per thread here
or per task thread of a Dask cluster's workers (grade-all and audit share this runner).

A job is data (a file name, its bytes and `grader grade` options) and so is what comes back (a
dict): a Dask worker needs nothing of the instructor's disk, and the student's code runs only in
the grading process's sandbox, never in the process that holds the results. Both ways run the same
function, so a class graded on a cluster gets the grades it would get here, test for test.
"""
import concurrent.futures as cf
import gc
import hashlib
import importlib.util
import io
import json
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import NoReturn

from ..archive import ArchiveError, deterministic_zip, folder_files
from ..grading import GradeOptions
from ..salt import deployment_salt
from ..sandbox.cgroup import kill_gone_judges, kill_judge
from ..sandbox.worker.jail import die_with_parent
from ..secret import PACKAGES, SALT_PATH
from ..spec import BUDGETS, NOT_RUN, Status
from ..submission import MAX_ZIP_BYTES
from . import INSTRUCTOR_PATH

REGRADE_SCALE = 4.0
"""`grade-all --regrade timed_out` grades again with wall-clock backstops this many times longer
(`grader grade --wall-scale`): more patience, the same CPU limits, so grades comparable with the rest."""
PINNED = ("hypothesis", "numpy", "torch")
"""What decides the hidden inputs (hypothesis's draws) and the results (numpy's and torch's arithmetic),
with Python's minor version: part of grader_version, and pinned in the Gradescope bundle."""
STOP_SECONDS = 10.0
"""After Ctrl-C, how long a grading process gets to stop its sandbox before it is killed."""
MAX_PAYLOAD_BYTES = 2 * MAX_ZIP_BYTES
"""The most of a student's files read for one grading: what `grader grade` reads at most (a zip
unpacked, a notebook), and room for a zip's own headers. More is `unreadable`, never read."""


class Outcome(StrEnum):
    """How a submission's grading ended: a gradebook row's status."""

    GRADED = "graded"
    EMPTY = "empty"  # nothing submitted: a missing or empty file, a folder or zip without files
    UNREADABLE = "unreadable"  # `grader grade` cannot read it (a corrupt zip, no exercise file, ...)
    TIMED_OUT = "timed_out"  # graded in part: a test stalled for lack of time (or the whole grading did)
    ERROR = "error"  # the grader itself failed (or the cluster lost the task): worth a rerun
    PENDING = "pending"  # not graded yet (the run was interrupted)


FINAL = frozenset({Outcome.GRADED, Outcome.EMPTY, Outcome.UNREADABLE})
"""Outcomes a rerun keeps when the submission and the grader are unchanged."""


class VersionMismatch(RuntimeError):
    """A Dask worker grades with another grader (or salt) than this machine's."""


class Empty(ValueError):
    """Nothing was submitted."""


class Unreadable(ValueError):
    """What was submitted is not a file that can be read (a FIFO, a device, a socket)."""


@dataclass(frozen=True)
class Job:
    """One submission to grade, as data: `name` is the file it is graded as (`alice.zip`)."""

    name: str
    data: bytes
    options: GradeOptions = GradeOptions()
    seconds: float = BUDGETS.backstop

    def digest(self) -> str:
        """What the grade depends on, of the submission: its name, bytes and the grading options."""
        text = json.dumps([self.name, hashlib.sha256(self.data).hexdigest(), self.options.to_json()])
        return hashlib.sha256(text.encode()).hexdigest()


def payload(source: Path) -> tuple[str, bytes]:
    """A submission as (file name, bytes): a file as it is, a folder as a zip of its files.

    Symbolic links are left out of a folder's zip: following one would read the instructor's disk;
    so are FIFOs, devices and sockets, never opened (a FIFO blocks its reader, a device reads for
    ever). Raises Empty when there is nothing to grade, Unreadable for a submission that is itself
    one of those or holds more than MAX_PAYLOAD_BYTES.
    """
    source = Path(source)
    if source.is_dir() and not source.is_symlink():
        return f"{source.name}.zip", _zip_folder(source)
    if source.exists() and not source.is_file():
        raise Unreadable(f"{source.name} is not a regular file (a FIFO, a device or a socket): not read")
    if not source.is_file():
        raise Empty("nothing submitted")
    if source.stat().st_size > MAX_PAYLOAD_BYTES:
        raise Unreadable(f"{source.name} is larger than {MAX_PAYLOAD_BYTES >> 20} MiB: not read")
    data = source.read_bytes()
    if not data:
        raise Empty(f"{source.name} is an empty file")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if all(member.is_dir() for member in archive.infolist()):
                raise Empty(f"{source.name} is a zip without files")
    except zipfile.BadZipFile:
        pass  # not a zip, or a broken one: `grader grade` says which
    return source.name, data


def _zip_folder(folder: Path) -> bytes:
    try:
        files = folder_files(folder, max_bytes=MAX_PAYLOAD_BYTES)
    except ArchiveError as error:
        raise Unreadable(f"{folder.name}/ {error}: not read") from error
    if not files:
        raise Empty(f"{folder.name}/ holds no file")
    return deterministic_zip(files)




def pins() -> dict[str, str]:
    """The versions of PINNED installed here (without a local label: torch's "+cpu"), and Python's."""
    found = {name: version(name).partition("+")[0] for name in PINNED}
    return {**found, "python": ".".join(platform.python_version_tuple()[:2])}


@cache
def grader_version() -> str:
    """What a grade depends on besides the submission: the sources of secret.PACKAGES (less
    grader/instructor/), the versions that decide inputs and results (pins), and the deployment's salt
    (hashed in: the salt never leaves the machine)."""
    digest = hashlib.sha256(json.dumps(pins(), sort_keys=True).encode())
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.origin:
            continue
        root = Path(spec.origin).parent
        for path in sorted(root.rglob("*.py")):
            name = path.relative_to(root.parent).as_posix()
            if not Path(name).is_relative_to(INSTRUCTOR_PATH):
                digest.update(name.encode() + b"\0" + path.read_bytes())
    digest.update(deployment_salt().encode())
    return f"{version('module9-transformer-lab')}+{digest.hexdigest()[:12]}"


_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()
_local = threading.local()


class _Judge:
    """A judge process that grades one job after another (`python -m grader.instructor.runner`), so
    that a class pays its imports (torch, the suites, the reference) once per thread, not per
    submission. Each grading is grading.grade, as `grader grade` runs it, with a fresh worker, in a
    process that never held another grading's data (serve)."""

    def __init__(self) -> None:
        # A session of its own: Ctrl-C at the terminal reaches grade-all, which stops it in order.
        # One OpenMP thread from the start: gradings running side by side on the cores otherwise
        # spin-wait in each other's way (measured: 8% less CPU time with two at once, and 1.76x
        # instead of 1.65x on 2 cores). The judge's tensors are tiny; a second thread buys nothing.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "grader.instructor.runner"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
        with _running_lock:
            _running.add(self.process)

    def grade(self, folder: Path, job: Job) -> dict | None:
        """The judge process's reply for the job (its outcome, message and scorecard), or None past
        job.seconds (then the process is stopped)."""
        request = {"folder": str(folder), "name": job.name, "options": job.options.to_json()}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], job.seconds)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            return None
        reply = json.loads(line)
        if reply.pop("closing", False):  # it lost its fork server and ends: the next job starts another
            self.close()
        return reply

    def close(self) -> None:
        _stop([self.process])
        with _running_lock:
            _running.discard(self.process)


def _judge() -> _Judge:
    """This thread's judge process, started if it has none or lost it."""
    judge = getattr(_local, "judge", None)
    if judge is None or judge.process.poll() is not None:
        judge = _local.judge = _Judge()
    return judge


def _grade_request(request: dict) -> dict:
    """One job in the judge process: its outcome, a message, and the scorecard as data."""
    from ..grading import grade
    from ..submission import SubmissionError

    os.chdir(request["folder"])  # messages name the submission as the student named it
    try:
        card = grade(Path(request["name"]), GradeOptions.from_json(request["options"]))
    except SubmissionError as error:
        return {"outcome": Outcome.UNREADABLE.value, "message": str(error)}
    except Exception as error:  # noqa: BLE001 - a grader error is the job's, not the process's
        lines = traceback.format_exception_only(error)
        return {"outcome": Outcome.ERROR.value, "message": lines[-1].strip()}
    return {"outcome": Outcome.GRADED.value, "message": "", "card": card.to_json()}


def _quietly(request: dict) -> dict:
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        return _grade_request(request)


class _ForkServer:
    """A child of the judge process that forks each grading, so that every grading starts from the state the
    judge process had before its first request: torch, hypothesis and the grader imported, nothing graded
    (issue 29). The judge process itself reads each reply (a scorecard: hidden messages, hidden inputs), and
    freed memory keeps those bytes: a grading forked from it would pass them on to its template and so to the
    next student's worker (template_client.forks_template cannot see them). This process never reads a request
    nor a reply: it gets each grading's two pipes as file descriptors over a Unix socket, forks a grading
    process that reads the one and writes the other, closes its copies, waits for it and sends back its wait
    status."""

    def __init__(self) -> None:
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        runner = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            self.socket.close()
            _fork_server(theirs, runner)  # never returns
        theirs.close()
        self._statuses = self.socket.makefile("r", encoding="utf-8")

    def grade(self, request: dict) -> dict:
        """_grade_request for `request`, in a grading process of the fork server's; an ERROR outcome if
        none could be forked, or if it ended without a reply. On Ctrl-C (the grading process gets it too)
        it waits for that process to stop its sandbox. Raises OSError once the fork server is gone."""
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        try:
            socket.send_fds(self.socket, [b"grade"], [request_read, reply_write])
        except OSError:
            os.close(request_write)
            os.close(reply_read)
            raise
        finally:
            os.close(request_read)  # the grading process's ends: once it has gone, ours see EOF
            os.close(reply_write)
        try:
            _write_all(request_write, json.dumps(request).encode())
            with open(reply_read, "rb") as pipe:
                data = pipe.read()
        finally:
            ended = self._ended()
        return _reply(data, ended)

    def _ended(self) -> dict:
        """The fork server's word on the grading just sent: {"status": its wait status} or {"refused":
        why no process could be forked}."""
        line = self._statuses.readline()
        if not line:
            raise ConnectionError("the judge process's fork server is gone")
        return json.loads(line)


def _write_all(fd: int, data: bytes) -> None:
    """Write the request and close the pipe; a grading process that is not there to read it (none could
    be forked, or it ended) is the fork server's to report, not an error here."""
    try:
        with open(fd, "wb") as pipe:
            pipe.write(data)
    except BrokenPipeError:
        pass


def _reply(data: bytes, ended: dict) -> dict:
    """The grading process's reply, or the ERROR outcome that says why there is none."""
    if "refused" in ended:
        return {"outcome": Outcome.ERROR.value,
                "message": f"no process to spare: the grading could not start ({ended['refused']})"}
    try:
        return json.loads(data)
    except ValueError:
        code = os.waitstatus_to_exitcode(ended["status"])
        return {"outcome": Outcome.ERROR.value,
                "message": f"the grading process ended with no reply (exit status {code})"}


def _fork_server(control: socket.socket, runner: int) -> NoReturn:
    """The fork server's loop, until the judge process hangs up (or dies: so does this process). It
    ignores SIGINT, which Ctrl-C sends the whole group: the grading process it is waiting for must get
    to stop its sandbox, and report how it ended. Its stdin and stdout, the judge process's pipes to
    grade-all, go to /dev/null: nothing of theirs is read here, and a grading process cannot write there."""
    try:
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gradings' (ignored if grade-all's was)
        die_with_parent(runner)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        while True:
            _, fds, _, _ = socket.recv_fds(control, 16, 2)
            if len(fds) != 2:
                break  # hung up (nothing comes but a grading's two pipes)
            control.sendall((json.dumps(_fork_grading(control, *fds, interrupt=interrupt)) + "\n").encode())
    finally:
        os._exit(0)


def _fork_grading(control: socket.socket, request: int, reply: int, *, interrupt: object) -> dict:
    """Fork a grading process for these pipes and wait for it: {"status": its wait status}, or
    {"refused": why} when there is no process to spare (the job is then an ERROR, never graded here)."""
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError as error:
        pid, refused = -1, {"refused": error.strerror or str(error)}
    if pid == 0:
        _grading(control, request, reply, server=server, interrupt=interrupt)  # never returns
    os.close(request)  # the grading process's now, or nobody's: its ends see EOF or EPIPE when it has gone
    os.close(reply)
    return refused if pid < 0 else {"status": os.waitpid(pid, 0)[1]}


def _grading(control: socket.socket, request: int, reply: int, *, server: int, interrupt: object) -> NoReturn:
    """A grading process: read its request, grade it (Ctrl-C stops the grading, which closes its sandbox
    on the way out: `interrupt` is the judge process's SIGINT handler), write its reply, and kill what is
    left of its sandbox's control groups."""
    status = 1
    try:
        control.close()  # the fork server's, not the grading's
        signal.signal(signal.SIGINT, interrupt)
        die_with_parent(server)
        with open(request, "rb") as pipe:
            job = json.loads(pipe.read())
        with open(reply, "w", encoding="utf-8") as pipe:
            pipe.write(json.dumps(_quietly(job)))
        status = 0
    finally:
        kill_judge(os.getpid())  # its sandbox's groups are gone already; their folder goes too
        os._exit(status)


def serve() -> None:
    """The judge process's loop: one JSON request per line in, one reply per line out.

    On Linux the fork server (_ForkServer) is forked first, before any request is read, and forks each job's
    grading process: each grading starts from that state, whatever this process graded before, and so each
    forks its sandbox's template (template_client.forks_template), sparing it torch's import. Where there is
    no fork (macOS, Windows) each job is graded here, in turn; this process then holds the earlier replies,
    but the worker is an interpreter of its own ("plain" mode) that gets from it only its command line, its
    environment (sandbox/launch.py builds it) and the submission's files, none of which holds another
    grading's data. If the fork server is gone, the job is an ERROR and this process ends (the next job starts
    a new one): a new fork server forked from here would carry the replies read so far."""
    forks = sys.platform == "linux"
    if forks:
        from .. import judge  # noqa: F401 - torch, hypothesis and the grader, imported once for every fork
        gc.freeze()  # out of the forks' collections' sight, which would copy their pages
        server = _ForkServer()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = server.grade(request) if forks else _quietly(request)
        except OSError as error:
            _answer({"outcome": Outcome.ERROR.value, "message": f"the grading could not start: {error}",
                     "closing": True})
            return
        _answer(reply)


def _answer(reply: dict) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def _stop(processes: list[subprocess.Popen]) -> None:
    """Interrupt grading processes (each closes its sandbox on the way out), then kill any left, and
    the control groups of their workers (a worker is in a session of its own: killpg misses it)."""
    for process in processes:
        _signal(process, signal.SIGINT)
    deadline = time.monotonic() + STOP_SECONDS
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
            process.wait()
        kill_judge(process.pid)
    kill_gone_judges()  # those of its gradings (forks of it, killed with it)


def _signal(process: subprocess.Popen, number: int) -> None:
    try:
        os.killpg(process.pid, number)  # its own session: its group is itself and what it started
    except ProcessLookupError:
        pass


def _result(outcome: Outcome, message: str = "", card: dict | None = None, seconds: float = 0.0) -> dict:
    return {"outcome": outcome.value, "message": message, "card": card, "grader": grader_version(),
            "pins": pins(), "seconds": round(seconds, 3)}


def _graded(card: dict, seconds: float) -> dict:
    """A scorecard's outcome: GRADED, or TIMED_OUT (with the card) where a test stalled (the machine
    was too loaded to tell whether it would pass: its status is "stalled") or was not run because the
    grading's --time-limit ran out (NOT_RUN): neither is a verdict on the code."""
    stalled = sum(test["status"] == Status.STALLED for test in card["tests"])
    if stalled:
        return _result(Outcome.TIMED_OUT, f"{stalled} test(s) stalled on a loaded machine: "
                                          "grade-all --regrade timed_out grades it again", card, seconds)
    not_run = sum(test["message"].startswith(NOT_RUN) for test in card["tests"])
    if not_run:
        return _result(Outcome.TIMED_OUT, f"{not_run} test(s) not run: the grading's --time-limit ran out",
                       card, seconds)
    return _result(Outcome.GRADED, card=card, seconds=seconds)


def grade_job(job: Job) -> dict:
    """Grade one job with grading.grade in this thread's judge process, wherever this runs (a
    thread here, a Dask worker there); returns the outcome and the scorecard as data."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grade-job-") as work:
        (Path(work) / job.name).write_bytes(job.data)
        reply = _judge().grade(Path(work), job)
    seconds = time.monotonic() - start
    if reply is None:
        return _result(Outcome.TIMED_OUT, f"grading ran past {job.seconds:g} s", seconds=seconds)
    if reply["outcome"] == Outcome.GRADED:
        return _graded(reply["card"], seconds)
    return _result(Outcome(reply["outcome"]), reply["message"], reply.get("card"), seconds)


def default_workers() -> int:
    """The cores this process may use (all of them where the platform cannot say: macOS, Windows)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@contextmanager
def _executor(workers: int, scheduler: str | None, security: object = None) -> Iterator[cf.Executor]:
    if scheduler is None:
        # Each job is a process of its own: the threads only wait for them.
        with cf.ThreadPoolExecutor(workers, thread_name_prefix="grade") as pool:
            yield pool
        return
    from distributed import Client

    with Client(scheduler, timeout="30s", set_as_default=False, security=security) as client:
        # pure=False: two identical submissions are still two tasks (two students, two rows).
        yield client.get_executor(pure=False)


def grade_jobs(jobs: Sequence[Job], workers: int, scheduler: str | None = None,
               security: object = None) -> Iterator[tuple[int, dict]]:
    """Yield (index in `jobs`, result) as each job ends: `workers` at a time here, or as tasks of
    the Dask cluster whose scheduler is at `scheduler` (tcp://HOST:PORT, or tls:// with `security`,
    a distributed.Security: instructor/cluster.py).

    Closing the iterator early (Ctrl-C) cancels the jobs not started and stops those running here.
    Raises VersionMismatch when a result was graded by another grader than this machine's (a
    cluster's worker): its grades would not be the ones `grader grade` gives here.
    """
    with _executor(workers, scheduler, security) as pool:
        futures = {pool.submit(grade_job, job): index for index, job in enumerate(jobs)}
        try:
            for future in cf.as_completed(futures):
                result = _outcome(future)
                differ = [f"{name} {theirs} (here {pins()[name]})" for name, theirs in result["pins"].items()
                          if pins().get(name) != theirs]
                if differ:
                    raise VersionMismatch(f"a worker has {', '.join(differ)}: install the same versions, "
                                          "which decide the hidden inputs and results, on both")
                if result["grader"] != grader_version():
                    raise VersionMismatch(
                        f"a worker grades with grader {result['grader']}, this machine with "
                        f"{grader_version()}: install the same grader, with the same salt "
                        f"({SALT_PATH.as_posix()} or GRADER_SALT), on both")
                yield futures[future], result
        finally:
            for future in futures:
                future.cancel()
            with _running_lock:
                running = list(_running)
                _running.clear()
            _stop(running)  # the judge processes too: running or idle, they end with the run


def _outcome(future: cf.Future) -> dict:
    try:
        return future.result()
    except Exception as error:  # the cluster lost the task (a worker died, could not unpickle it...)
        return _result(Outcome.ERROR, f"{type(error).__name__}: {error}")


if __name__ == "__main__":
    serve()
