"""The judge's handle on the sandbox of one submission: a worker for it, replaced whenever one is lost.

The sandbox's rooms, judge side: modes.py (which mode runs here, and what each isolates), uids.py,
processes.py (/proc, and killing), clocks.py (time limits), errors.py, launch.py, channel.py (the pipes),
template_client.py and worker_client.py (the judge's side of each process), cgroup.py and affinity.py.
What runs inside is the package worker/, copied whole into each sandbox: its confinement (jail.py,
limits.py, seccomp.py, landlock.py), its template (template.py), its server (serve.py) and the protocol
both sides speak (protocol.py, messages.py). docs/grading.md, "Threat model", says what each mode holds.

Each worker is a fresh process (never a fork of the judge, which holds the reference): in the confined
modes a fork of its sandbox's template (an interpreter that imported torch and never the submission),
in "plain" mode an interpreter of its own. Linux, macOS and Windows all run it ("plain" mode off Linux),
each with the limits it supports.
"""
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..results import safe_text
from ..spec import BUDGETS
from ..submission import special
from . import cgroup
from .clocks import ASLEEP, CPU, SEES_STARVATION, STALLED, Allowance, Timeout
from .errors import WorkerLost
from .launch import CODE_PACKAGE
from .modes import FORKED_MODES, describe, isolation_summary, sandbox_mode
from .template_client import Template, forks_template
from .worker.limits import Limits, refused_limits
from .worker_client import Worker

WORKER_PACKAGE = Path(__file__).parent / "worker"
"""What runs inside the sandbox, copied whole into each one (as CODE_PACKAGE)."""


class Sandbox:
    """A worker for one submission, replaced whenever one is lost.

    It copies the submission and the worker's code into a folder of `scratch` that only root can
    write (world-traversable in "setuid" mode, where the worker reaches them by their paths).
    `hidden`: it will run hidden tests (see sandbox_mode); `report` is what reports say of it.
    """

    def __init__(self, submission_dir: Path, scratch: Path, timeout_scale: float = 1.0,
                 limits: Limits | None = None, *, hidden: bool = True, unsafe_no_sandbox: bool = False):
        self.submission_dir, self.scratch = Path(submission_dir), Path(scratch)
        cpu_seconds = BUDGETS.scaled(timeout_scale).worker_cpu_seconds
        self.mode = sandbox_mode(hidden, unsafe_no_sandbox)
        self.limits = limits or Limits(cpu_seconds=cpu_seconds)
        self.report = describe(self.mode, unsafe_no_sandbox)
        self.area = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self.scratch))
        shutil.copytree(self.submission_dir, self.area / "submission", symlinks=True, ignore=_left_out)
        shutil.copytree(WORKER_PACKAGE, self.area / "code" / CODE_PACKAGE,
                        ignore=shutil.ignore_patterns("__pycache__"))
        for folder in ("submission", "code"):  # readable, whatever the originals' modes
            _readable_by_all(self.area / folder)
        if self.mode == "setuid":
            for folder in (self.scratch, self.area):
                folder.chmod(0o711)
        self.worker: Worker | None = None
        self.template: Template | None = None
        self.blocked: frozenset[str] = frozenset()
        refused = refused_limits(self.limits, per_uid=self.mode in ("root", "setuid")) + _ungrouped(self.mode)
        self.not_set = [safe_text(text, 200) for text in refused]
        """The limits this platform refuses a worker (found by the judge: worker/limits.refused_limits), and
        the control group's where none can be made."""
        self.refused: tuple[tuple[str, str], ...] = ()
        self._cpu_before = self._waited_before = 0.0  # the clocks of the workers closed so far

    def start(self) -> None:
        """Start a worker now (or, where workers are forked, their template), so that its imports overlap
        the judge's own work."""
        if self.mode in FORKED_MODES:
            if self.template is None or self.template.lost:
                self.template = Template(self.area, self.mode, limits=self.limits, forked=forks_template())
        elif self.worker is None:
            self.worker = Worker(self.area, self.blocked, confinement_mode=self.mode, limits=self.limits,
                                 refused=self.refused)

    def block(self, module: str) -> None:
        """Never import this submission module again: importing it fails at once, in a new worker
        (it may have hung or flooded; the worker that tried it may hold half of it)."""
        self.blocked |= {module}
        self._close_worker()

    def refuse(self, function: str, message: str) -> None:
        """From the next worker on, `function` ("module.Qual.name" of the submission, e.g. one that
        hung) raises BLOCKED with `message` wherever it is called from, instead of running."""
        self.refused += ((function, message),)
        self._close_worker()

    def ready(self) -> None:
        """Start a worker if none is running and wait until it can take calls."""
        self.start()
        if self.worker is None:  # forked now (a fork that fails is closed already)
            self.worker = Worker(self.area, self.blocked, confinement_mode=self.mode, limits=self.limits,
                                 refused=self.refused, template=self.template)
        try:
            self.worker.wait_ready()
        except WorkerLost:  # the worker is closed already
            self._retire()
            raise

    def cpu_seconds(self) -> float:
        """The CPU seconds its workers have used since each was ready: the clock time limits count."""
        if self.worker is not None and self.worker._ready:
            self.worker.cpu = self.worker.cpu_seconds()
        return self._cpu_before + (self.worker.cpu if self.worker else 0.0)

    @property
    def waited(self) -> float:
        """The seconds spent waiting for its workers' replies while they were not waiting for a CPU
        themselves: the clock of the wall-clock backstop."""
        return self._waited_before + (self.worker.waited if self.worker else 0.0)

    def allowance(self, seconds: float, wall_scale: float = 1.0) -> Allowance:
        """From now on, `seconds` of CPU, and `seconds` * BUDGETS.wall_factor * wall_scale of waiting."""
        wall = seconds * BUDGETS.wall_factor * wall_scale
        return Allowance(self.cpu_seconds() + seconds, self.waited + wall, seconds)

    def spent(self, allowance: Allowance) -> Timeout | None:
        """How `allowance` ran out by the last reading of the clocks, None if it has not."""
        if self._cpu_before + (self.worker.cpu if self.worker else 0.0) >= allowance.cpu:
            return CPU
        if self.waited >= allowance.waited:
            return ASLEEP if SEES_STARVATION else STALLED
        return None

    def request(self, message: dict, limit: "float | Allowance") -> Any:
        """Send one request to the worker (started if needed); it may run `limit` CPU seconds, or
        until the Allowance is spent."""
        if not isinstance(limit, Allowance):
            limit = self.allowance(limit)
        self.ready()
        try:
            return self.worker.request(message, limit.cpu - self._cpu_before,
                                       limit.waited - self._waited_before)
        except WorkerLost:  # the worker is closed already
            self._retire()
            raise

    def isolation(self) -> dict:
        """How this sandbox isolated the student's code, for every report: its mode and what it
        isolates (describe), one line a student can read, and the limits this platform refused."""
        summary = isolation_summary(self.mode, self.not_set, memory=self.limits.memory)
        return {**self.report, "summary": summary, "not_set": list(self.not_set)}

    def fresh_worker(self) -> None:
        """Close the worker: the next call gets a new one (started now, where that takes long)."""
        self._close_worker()
        self.start()

    def close(self) -> None:
        """Close the worker and its template."""
        self._close_worker()
        if self.template is not None:
            self.template.close()
            self.template = None

    def _close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self._retire()

    def _retire(self) -> None:
        """Forget the closed worker, keeping its clocks' last readings."""
        self._cpu_before += self.worker.cpu
        self._waited_before += self.worker.waited
        self.worker = None


def _readable_by_all(folder: Path) -> None:
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def _ungrouped(confinement_mode: str) -> list[str]:
    """The limit of a worker's processes together, where no control group holds it (not root: a student's
    check, a SLURM job; a container without cgroups), said as the limits a platform refuses are."""
    if confinement_mode in ("root", "setuid") and "memory" in cgroup.available():
        return []
    return ["the memory of its processes together (no control group here: each process has the limit alone)"]


def _left_out(folder: str, names: list[str]) -> set[str]:
    """What a submission's copy leaves out: caches, hidden entries, and FIFOs, devices and sockets,
    never opened (submission.special)."""
    return {name for name in names if name == "__pycache__" or name.startswith(".")
            or special(Path(folder, name))}
