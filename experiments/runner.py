"""Executing runs: seeded, one cached JSON file per finished run (so an interrupted command
resumes), in worker processes of one thread each, with a progress bar on stderr.

A run is (study module, function, config). Its function is called as fn(impl, **config) and
returns a JSON-able dict. A run that hits an exercise still left as a stub (NotImplementedError)
is "skipped" with a one-line message naming it; any other exception is an "error" with a
one-line message and where it was raised. Neither is cached, so fixing the code reruns them.
"""
import hashlib
import importlib
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import torch

from .common import Impl

FORMAT = 1  # bump when the meaning of a cached result changes for every study


@dataclass(frozen=True)
class Run:
    """One unit of work of a study: `study`.`fn`(impl, **config)."""

    study: str
    fn: str
    config: dict = field(hash=False)
    label: str = ""
    timing: bool = False  # measures wall time: runs alone, after everything else

    def key(self, digest: str, version: int) -> str:
        """Stable id of the run: config, implementation source, study version, torch version."""
        blob = json.dumps([FORMAT, self.study, version, self.fn, self.config, digest, torch.__version__],
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def clean(obj):
    """obj with NaN/inf replaced by None, so the JSON is strict (and parses anywhere)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def write_atomic(path: Path, text: str) -> None:
    """Write a file atomically (a process killed mid-write leaves the old file, not half a new one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def dump(obj, path: Path) -> None:
    """Write strict JSON atomically."""
    write_atomic(path, json.dumps(clean(obj), indent=1, allow_nan=False))


class Cache:
    """DIR/<study>/<key>.json per finished run. The folder ignores itself in git (like
    .pytest_cache), as it is a resume store, not a result."""

    def __init__(self, directory: Path, digest: str):
        self.directory, self.digest = Path(directory), digest
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / ".gitignore").write_text("# resume cache of `grader experiments`\n*\n")

    def path(self, run: Run) -> Path:
        version = importlib.import_module(f"{__package__}.{run.study}").VERSION
        version = version[run.fn] if isinstance(version, dict) else version
        return self.directory / run.study / f"{run.fn}-{run.key(self.digest, version)}.json"

    def load(self, run: Run) -> dict | None:
        path = self.path(run)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())["outcome"]
        except (ValueError, KeyError):
            return None  # a corrupt entry is simply recomputed

    def save(self, run: Run, outcome: dict) -> None:
        path = self.path(run)
        path.parent.mkdir(parents=True, exist_ok=True)
        dump({"study": run.study, "fn": run.fn, "label": run.label, "config": run.config,
              "outcome": outcome}, path)


# ----------------------------------------------------------------------------- one run

def _impl_frame(exc: BaseException, directory: Path):
    """The innermost traceback frame inside the implementation (None if there is none)."""
    found = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if Path(frame.f_code.co_filename).resolve().parent == directory:
            found = frame
    return found


def describe(exc: BaseException, impl: Impl) -> dict:
    """A skipped/error outcome with a one-line message (no traceback wall)."""
    frame = _impl_frame(exc, impl.directory)
    if frame is None:
        where, name = "", ""
    else:
        module = Path(frame.f_code.co_filename).stem
        qualname = frame.f_code.co_qualname.removesuffix(".__init__")
        name, where = f"{module}.{qualname}", impl.where(f"{module}.py")
    if isinstance(exc, NotImplementedError) and name:
        return {"status": "skipped", "message": f"{name} is not implemented yet ({where})"}
    if frame is not None:
        where = f" (in {name}, {where}:{frame.f_lineno})"
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return {"status": "error", "message": f"{type(exc).__name__}: {first_line}{where}"}


_IMPLS: dict[str, Impl] = {}


def execute(directory: str, run: Run) -> dict:
    """Run one run in this process: {"status": "ok", "result": ...} or a skipped/error outcome."""
    impl = _IMPLS.get(directory) or _IMPLS.setdefault(directory, Impl(Path(directory)))
    fn = getattr(importlib.import_module(f"{__package__}.{run.study}"), run.fn)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        outcome = {"status": "ok", "result": fn(impl, **run.config)}
    except Exception as exc:  # the implementation under test may raise anything
        outcome = describe(exc, impl)
    # CPU time does not grow when other processes share the cores; wall time does.
    return {**outcome, "cpu_seconds": time.process_time() - cpu, "wall_seconds": time.perf_counter() - wall}


def _execute_indexed(args: tuple[str, int, Run]) -> tuple[int, dict]:
    directory, i, run = args
    return i, execute(directory, run)


def _init_worker() -> None:
    # Tiny models: one thread per process beats several threads per step (measured), and it
    # keeps results independent of how many workers run.
    torch.set_num_threads(1)


# ----------------------------------------------------------------------------- many runs

class Progress:
    """A one-line progress bar on stderr (one line per run when stderr is not a terminal)."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.cached = total, 0, 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.tty = self.stream.isatty()

    def update(self, label: str, outcome: dict, cached: bool) -> None:
        self.done += 1
        self.cached += cached
        elapsed = time.perf_counter() - self.start
        computed = self.done - self.cached
        left = (self.total - self.done) * elapsed / computed if computed else 0.0
        width = 24
        bar = "#" * (width * self.done // max(1, self.total))
        status = "" if outcome["status"] == "ok" else f" [{outcome['status']}]"
        line = (f"[{bar:<{width}}] {self.done}/{self.total} runs ({self.cached} cached) "
                f"{elapsed:5.0f}s, ~{left:.0f}s left  {label}{status}")
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def run_all(runs: list[Run], impl: Impl, cache: Cache, jobs: int = 1) -> list[dict]:
    """Outcomes of `runs`, in order: cached ones loaded, the rest computed (timing runs last,
    one at a time). jobs > 1 uses that many single-threaded worker processes."""
    outcomes: list[dict | None] = [None] * len(runs)
    progress = Progress(len(runs))
    todo = []
    for i, run in enumerate(runs):
        cached = cache.load(run)
        if cached is not None:
            outcomes[i] = {**cached, "cached": True}
            progress.update(run.label, cached, cached=True)
        else:
            todo.append(i)

    def finish(i: int, outcome: dict) -> None:
        if outcome["status"] == "ok":
            cache.save(runs[i], outcome)
        outcomes[i] = {**outcome, "cached": False}
        progress.update(runs[i].label, outcome, cached=False)

    parallel = [i for i in todo if not runs[i].timing]
    serial = [i for i in todo if runs[i].timing]
    directory = str(impl.directory)
    if jobs > 1 and len(parallel) > 1:
        pool = get_context("spawn").Pool(jobs, initializer=_init_worker)
        try:
            work = [(directory, i, runs[i]) for i in parallel]
            for i, outcome in pool.imap_unordered(_execute_indexed, work):
                finish(i, outcome)
            pool.close()
        finally:
            pool.terminate()  # on Ctrl-C too: no worker keeps computing after we return
            pool.join()
        parallel = []
    threads = torch.get_num_threads()
    _init_worker()
    _IMPLS[directory] = impl
    try:
        for i in parallel + serial:
            finish(i, execute(directory, runs[i]))
    finally:
        torch.set_num_threads(threads)
    return outcomes


def default_jobs() -> int:
    """One worker per available core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
