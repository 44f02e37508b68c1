"""What the hostile-submission tests share: the escape a submission attempts (processes that try to
outlive their grading), finding what survived, calling a sandbox's attention module, and stopping
the server processes a test started."""
import os
import signal
import subprocess
from pathlib import Path

from grader.sandbox.client import Sandbox


def escape_code(marker: str) -> str:
    """Python that starts `sleep MARKER` three ways out of its process group: a new session, and a
    double fork into another session."""
    return f"""\
subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
"""


def state(process: Path) -> str:
    """A /proc/PID entry's state letter (Z: a zombie)."""
    return (process / "stat").read_text().rsplit(")", 1)[1].split()[0]


def survivors(marker: str) -> list[int]:
    """Processes still sleeping `marker` seconds (not zombies)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (entry / "cmdline").read_bytes().decode(errors="replace") and state(entry) != "Z":
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def call(box: Sandbox, target: str, *args, timeout: float = 60.0):
    """Call attention.TARGET(*args) in the sandbox's worker; its result."""
    return box.request({"op": "call", "target": f"attention.{target}", "args": list(args)}, timeout)["result"]


def stop_sessions(processes: list[subprocess.Popen]) -> None:
    """Stop processes started in sessions of their own (a Dask scheduler, its workers): SIGTERM to
    each session, then SIGKILL to any still there after 20 s."""
    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
