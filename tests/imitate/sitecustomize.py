"""Imitates macOS's or Windows' POSIX gaps in this interpreter and in every one it starts (tests only).

With this folder on PYTHONPATH and GRADER_IMITATE=macos or windows
(tests/autograder/sandbox/test_platforms.py):
- macos: setrlimit(RLIMIT_AS) raises ValueError (as macOS does), and so does setrlimit(RLIMIT_DATA) (macOS
  accepts it, but memory from mmap escapes it, so the grader does not set it off Linux: limits.py), and
  os.sched_getaffinity is gone;
- windows: the `resource` and `fcntl` modules cannot be imported; os.fork, os.killpg, os.setsid,
  os.sched_getaffinity, select.poll and signal.SIGXCPU are gone (so the judge talks to its workers through
  the threaded channel, and a worker out of time stops itself, as on Windows), and so is /proc to pathlib
  (so the judge's clocks are the wall clock, as without /proc; psutil, standing in for its Windows
  backend, still reads it).
subprocess.Popen passes the imitation on (this folder and the variables) to every process it starts,
the sandbox's workers too, whatever environment they are given. Each imitating interpreter appends
its pid and command line to GRADER_IMITATE_LOG, so a test can tell that the imitation reached them.
Only an imitation: the platforms' other differences (paths, other signals) are not reproduced;
subprocess still starts programs by fork and exec in C, where Windows has CreateProcess.
"""
import builtins
import os
import pathlib
import signal
import subprocess
import sys

PLATFORM = os.environ.get("GRADER_IMITATE", "")
_PASSED_ON = ("GRADER_IMITATE", "GRADER_IMITATE_LOG")
_HIDDEN_MODULES = ("resource", "fcntl")


_OWN_BACKENDS = ("psutil",)
"""Libraries whose Linux backend imports what is hidden: on Windows they run their Windows backend."""


def _hide_modules() -> None:
    """`import resource` and `import fcntl` fail, except in _OWN_BACKENDS."""
    real_import = builtins.__import__

    def importing(name, globals=None, locals=None, fromlist=(), level=0):
        importer = (globals or {}).get("__name__") or ""
        hidden = level == 0 and name.partition(".")[0] in _HIDDEN_MODULES
        if hidden and not importer.startswith(_OWN_BACKENDS):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = importing


def _imitate_macos() -> None:
    import resource

    setrlimit = resource.setrlimit

    def refusing(which, limits):
        if which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
            raise ValueError("current limit exceeds maximum limit")
        return setrlimit(which, limits)

    resource.setrlimit = refusing
    del os.sched_getaffinity


def _hide_proc() -> None:
    """pathlib finds no /proc: what the grader reads of it through Path is missing."""
    def missing(method):
        def without_proc(self, *args, **kwargs):
            if self.parts[:2] == ("/", "proc"):
                raise FileNotFoundError(2, "No such file or directory (no /proc here)", str(self))
            return method(self, *args, **kwargs)
        return without_proc

    for name in ("stat", "open", "iterdir"):  # is_file, read_text, ... go through these
        setattr(pathlib.Path, name, missing(getattr(pathlib.Path, name)))


def _imitate_windows() -> None:
    import select

    _hide_modules()
    _hide_proc()
    for name in ("killpg", "setsid", "sched_getaffinity", "fork"):
        delattr(os, name)
    del select.poll
    del signal.SIGXCPU


def _pass_on() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    start = subprocess.Popen.__init__

    def imitating(self, args, *rest, env=None, **kwargs):
        env = dict(os.environ if env is None else env)
        env.update({name: os.environ[name] for name in _PASSED_ON if name in os.environ})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
        start(self, args, *rest, env=env, **kwargs)

    subprocess.Popen.__init__ = imitating


if PLATFORM in ("macos", "windows"):
    (_imitate_macos if PLATFORM == "macos" else _imitate_windows)()
    _pass_on()
    if os.environ.get("GRADER_IMITATE_LOG"):
        with open(os.environ["GRADER_IMITATE_LOG"], "a") as log:
            log.write(f"{os.getpid()} {PLATFORM} {' '.join(sys.orig_argv)}\n")
