"""The judge's side of one worker: start it (forked by the sandbox's template, or launched in "plain"
mode), send it requests over its pipes (channel.py) and check each reply (worker/messages.py), time it out
on its clocks (clocks.py), and kill it and all it started.

A call out of time learns where the student's code was, one way per platform: on POSIX the judge sends
SIGXCPU once its clock says so; where there is no SIGXCPU (Windows) each request carries its CPU seconds
(worker/messages.CPU_SECONDS) and the worker's watchdog stops the code once they are used. Either way the
worker's reply says where, and the judge kills a worker that does not answer within a grace.

A crash, exit, hang or a reply that does not answer its request costs the call that caused it
(WorkerLost); the sandbox then starts a new worker. The worker's own output goes to its log, a capped
file, never to the judge.
"""
import io
import itertools
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ..spec import BUDGETS
from .cgroup import Group
from .channel import Deadline, channel
from .clocks import ASLEEP, CPU, POLL_SECONDS, STALLED, OutOfTime, Timeout
from .errors import StudentError, WorkerLost
from .launch import launch, log, tail
from .processes import PROC, cpu_of, descendants, kill_launched, kill_uid, scheduled, uid_of
from .template_client import Template
from .uids import worker_gid, worker_uid
from .worker.jail import Confinement
from .worker.limits import Limits
from .worker.messages import CPU_SECONDS, GO, READY, TIME_LIMIT, Op, checked
from .worker.protocol import ProtocolError

SIGXCPU = getattr(signal, "SIGXCPU", None)
"""How the judge stops a worker out of time where the platform has it (POSIX); None: Windows."""


class Worker:
    """One confined worker process serving one submission (never importing its `blocked` modules).

    `area` is the sandbox's folder: area/code (the worker's code) and area/submission (a copy),
    both read-only to the worker; each worker gets a new home folder of its own. In FORKED_MODES it is
    forked by the sandbox's `template`; in "plain" mode it is an interpreter of its own.
    """

    def __init__(self, area: Path, blocked: frozenset[str], *, confinement_mode: str, limits: Limits,
                 refused: tuple[tuple[str, str], ...] = (), template: Template | None = None):
        self.mode, self.refused, self.template = confinement_mode, refused, template
        self.started = time.monotonic()
        self.cpu = self.waited = 0.0  # its clocks since it was ready: CPU seconds used, seconds waited for
        self._cpu_at_ready = 0.0
        self.returncode: int | None = None
        self.uid = worker_uid() if self.mode in ("root", "setuid") else None
        home = ""  # "root" and "userns": the template mounts each worker a home of its own
        if self.mode in ("setuid", "plain"):
            home = tempfile.mkdtemp(prefix="home-", dir=area)
            if self.uid is not None:
                os.chown(home, self.uid, worker_gid())
        log_fd, self.log_path = log(area, "worker-")
        # One control group for it and all it starts, where the machine allows (as root)
        self.group = Group.create(limits.group_memory_bytes, limits.processes, limits.cpus) \
            if self.uid is not None else None
        self.memory, self.out_of_memory = limits.memory, False
        self._ready, self.process, self.inner_pid = False, None, None
        self._ids = itertools.count(1)
        try:
            if template is None:
                self._start(area, home, blocked, limits, log_fd)
            else:
                self._fork(template, home, blocked, log_fd)
        except BaseException:
            if self.group and template is None:  # a fork that failed is closed already
                self.group.remove()
            raise
        finally:
            os.close(log_fd)

    def _start(self, area: Path, home: str, blocked: frozenset[str], limits: Limits, log_fd: int) -> None:
        """A worker of its own ("plain" mode): jail.py confines it, then serves."""
        confinement = Confinement(self.mode, submission=str(area / "submission"), home=home,
                                  limits=limits)
        arguments = [confinement.to_json(), confinement.submission, ",".join(sorted(blocked))]
        self.process = launch("jail", arguments, confinement_mode=self.mode, group=None, area=area, cwd=home,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, log_fd=log_fd)
        self.pid = self.process.pid
        self.channel = channel(self.process.stdin, self.process.stdout)

    def _fork(self, template: Template, home: str, blocked: frozenset[str], log_fd: int) -> None:
        """A worker forked by the template: in its control group before it may import the submission."""
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        self.channel = channel(io.FileIO(requests_write, "wb"), io.FileIO(replies_read, "rb"))
        try:
            self.pid, self.inner_pid = template.spawn(self.uid or 0, worker_gid() if self.uid else 0, home,
                                                      blocked, (requests_read, replies_write, log_fd))
            if self.group:
                self.group.add(self.pid)
            self.channel.send(GO, time.monotonic() + BUDGETS.worker_start)
        except (OSError, Deadline, WorkerLost) as error:
            self.close()
            raise error if isinstance(error, WorkerLost) else WorkerLost(
                f"the worker could not start: {error}") from None
        finally:
            os.close(requests_read)
            os.close(replies_write)

    def request(self, message: dict, cpu_deadline: float, waited_deadline: float) -> Any:
        """Send one request and return its reply's "ok" value; StudentError or WorkerLost otherwise.
        It may run until the worker's clocks (self.cpu, self.waited) reach these deadlines."""
        self.wait_ready()  # start-up is not charged to the call
        request = {**message, "id": next(self._ids)}
        if SIGXCPU is None:  # the worker stops itself once they are used (worker/serve.Watchdog)
            self.cpu = self.cpu_seconds()
            request[CPU_SECONDS] = max(cpu_deadline - self.cpu, 0.0)
        try:
            self.channel.send(request, time.monotonic() + BUDGETS.worker_start)
            reply = checked(request, self._await(cpu_deadline, waited_deadline))
        except OutOfTime as out:
            raise self._time_out(request, out.timeout) from None
        except Deadline:  # the request could not even be written
            self.close()
            raise WorkerLost(STALLED.value, STALLED) from None
        except (EOFError, OSError, ProtocolError) as error:
            self.close()
            raise WorkerLost(self._death_reason(error)) from None
        if "error" in reply:
            error = reply["error"]
            if error["type"] == TIME_LIMIT and SIGXCPU is None:  # its watchdog saw it before the judge did
                raise self._lost(CPU, error)
            message = error["message"]
            if "MemoryError" in error["type"] or "allocate memory" in message.lower():  # torch's, numpy's
                message = f"out of memory (the limit is {self.memory} a worker): {message}"
            raise StudentError(error["type"], message, error["where"], error["file"], error["line"])
        return reply["ok"]

    def cpu_seconds(self) -> float:
        """CPU seconds the worker and every process it started have used since it was ready: its
        control group's count where it has one (double forks and new sessions included), else the sum
        over its process tree in /proc; where there is neither (macOS), wall-clock seconds since it
        started."""
        used = self.group.cpu_seconds() if self.group else None
        if used is None and PROC:
            used = sum(map(cpu_of, descendants(self.pid)))
        return (time.monotonic() - self.started if used is None else used) - self._cpu_at_ready

    def _await(self, cpu_deadline: float, waited_deadline: float) -> Any:
        """The worker's next message; OutOfTime once its CPU clock reaches cpu_deadline, or its waited
        clock waited_deadline (the seconds waited, less those it spent waiting for a CPU)."""
        waited, starved, queued_first = 0.0, 0.0, None
        while True:
            # self.cpu, read last, is at most the CPU used: a thread's CPU grows no faster than the clock
            left = min(cpu_deadline - self.cpu, waited_deadline - self.waited - waited + starved)
            start = time.monotonic()
            try:
                reply = self.channel.receive(start + min(max(left, 0.01), POLL_SECONDS))
            except Deadline:
                waited += time.monotonic() - start
            else:
                self.waited += waited + time.monotonic() - start - starved
                return reply
            self.cpu = self.cpu_seconds()
            queued = scheduled(descendants(self.pid))[1]  # a call's first poll sets the zero
            queued_first = queued if queued_first is None else queued_first
            starved = queued - queued_first
            if self.cpu >= cpu_deadline:
                self.waited += waited - starved
                raise OutOfTime(CPU)
            if self.waited + waited - starved >= waited_deadline:
                self.waited += waited - starved
                raise OutOfTime(ASLEEP if self._asleep() else STALLED)

    def _asleep(self) -> bool:
        """Whether the worker neither runs nor waits for a CPU (it sleeps, or waits for something
        else) over a short look; False where /proc cannot tell."""
        pids = descendants(self.pid)
        before = sum(scheduled(pids))
        time.sleep(BUDGETS.grace)
        return before > 0 and sum(scheduled(pids)) == before

    def _time_out(self, request: dict, timeout: Timeout) -> WorkerLost:
        """`request` ran out of time: wait a grace for the worker's reply saying where the student's code
        was (it raises TimeLimit there: on SIGXCPU, or once its watchdog sees the request's CPU seconds
        used; a sleeping worker's watchdog never does), then kill it."""
        error = {}
        if timeout == CPU or (timeout == ASLEEP and SIGXCPU is not None):
            if SIGXCPU is not None:
                self._signal(SIGXCPU)
            try:
                error = checked(request, self._await(*self._grace(request))).get("error") or {}
            except (OutOfTime, Deadline, EOFError, OSError, ProtocolError):
                pass  # it did not say (stuck in a C call, or it caught TimeLimit)
        return self._lost(timeout, error)

    def _grace(self, request: dict) -> tuple[float, float]:
        """The deadlines, on the worker's clocks, for its reply once it is out of time. The watchdog counts
        the worker's own CPU: where the judge's clock is the wall clock (no /proc), that lags it by the
        worker's wait for a CPU, so it gets up to the request's seconds more."""
        grace = BUDGETS.grace
        if SIGXCPU is None and not (PROC or self.group):
            grace = max(grace, request[CPU_SECONDS])
        return self.cpu + grace, self.waited + grace * BUDGETS.wall_factor

    def _lost(self, timeout: Timeout, error: dict) -> WorkerLost:
        """Kill the worker, whose call ran out of time: lost, with where the student's code was if its
        reply said so (a TIME_LIMIT error)."""
        self.close()
        said = error if error.get("type") == TIME_LIMIT else {}
        return WorkerLost(timeout.value, timeout, said.get("function", ""), said.get("where", ""))

    def wait_ready(self) -> None:
        """Block until the worker has imported what it needs (its first message: within
        BUDGETS.worker_start seconds of its CPU), then tell it the functions it must refuse; WorkerLost,
        with the end of its log, if it could not."""
        if self._ready:
            return
        try:
            try:
                first = self._await(BUDGETS.worker_start, BUDGETS.worker_start * BUDGETS.wall_factor)
            except OutOfTime:
                raise Deadline("no answer in time") from None
            if first != READY:
                raise ProtocolError("its first message is not the one it sends when ready")
            for function, message in self.refused:
                request = {"op": Op.REFUSE, "function": function, "message": message, "id": next(self._ids)}
                self.channel.send(request, time.monotonic() + BUDGETS.worker_start)
                if "error" in checked(request, self.channel.receive(time.monotonic() + BUDGETS.worker_start)):
                    raise ProtocolError(f"it could not refuse {function}")
        except (Deadline, EOFError, OSError, ProtocolError) as error:
            self.close()  # first: then its log says all it will
            ending = self.log_tail()
            said = f"; its log ends with:\n{ending}" if ending else " (its log is empty)"
            raise WorkerLost(f"the worker could not start: {error}{said}") from None
        self._cpu_at_ready = self.cpu_seconds()
        self.cpu, self.waited, self._ready = 0.0, 0.0, True

    def log_tail(self) -> str:
        """The end of the worker's log (what it printed, and why it stopped, if it said), safe to show."""
        return tail(self.log_path)

    def _death_reason(self, error: BaseException) -> str:
        code = self.returncode
        if isinstance(error, ProtocolError):
            return f"the worker's reply was refused: {error}"
        if code is not None and code < 0 and self.out_of_memory:
            return f"the worker ran out of memory (the limit is {self.memory}, all it starts included) and " \
                   "was killed"
        if code is not None and code < 0:
            return f"the process was killed by signal {signal.Signals(-code).name}"
        if code is not None:
            return f"the process exited with code {code} (os._exit or a crash)"
        return "the process stopped answering"

    def _alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return uid_of(Path(f"/proc/{self.pid}")) is not None  # None: gone, or a zombie

    def close(self) -> None:
        """Kill the worker and every process it started, wait until they are gone, remove its group."""
        if self._ready and self._alive():
            self.cpu = self.cpu_seconds()  # its last reading: the sandbox's clock keeps it
        self._kill()
        if self.group:
            self.out_of_memory = self.group.oom_killed()
            self.group.remove()
        self.channel.close()

    def _kill(self) -> None:
        """Kill the worker and all it started, and keep its exit code, the one way its mode has: launched
        ("plain"), its process group and each descendant found; forked into its template's PID namespace
        ("root", "userns"), the template, the namespace's first process, kills every other one and reaps
        the worker; "setuid" (no namespace), its control group and every process of its uid, then the
        template reaps it."""
        if self.process is not None:
            kill_launched(self.process, self.mode)
            self.returncode = self.process.returncode
            return
        if self.mode == "setuid":
            if self.group:
                self.group.kill()
            kill_uid(self.uid)
        if self.template is not None and self.inner_pid is not None:
            self.returncode = self.template.end(self.inner_pid)

    def _signal(self, number: int) -> None:
        try:
            os.kill(self.pid, number)  # forked: the worker itself; "plain": the interpreter it is
        except ProcessLookupError:
            pass
