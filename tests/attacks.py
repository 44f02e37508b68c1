"""What the hostile-submission tests share: the attacks a submission makes (processes that try to
outlive their grading, hold a worker's memory or CPU, share memory with the host, fill the disk; forged
replies and a pipe that stops moving, against the judge), finding what survived, calling a sandbox's
attention module, and stopping the server processes a test started.

The attacks are Python source (the class-level proof runs them at a submission's import, the
per-attack tests call them in a worker) or the bytes a worker sends (the protocol's tests decode them).
"""
import base64
import io
import json
import os
import signal
import struct
import subprocess
import zipfile
import zlib
from textwrap import dedent, indent

import numpy as np

from grader.instructor.hostile import escape_code
from grader.sandbox.client import Sandbox
from grader.sandbox.worker.protocol import MAX_BYTES, encode


def contained_code(marker: str) -> str:
    """Python that defines the attacks on a worker's share of the machine (issue 18), each a function:
    hog (children holding memory at once), spin (busy loops in sessions of their own), escape
    (escape_code), shm (a SysV segment the host would keep), fill (write files until it fails)."""
    return dedent("""\
        import ctypes, ctypes.util, os, subprocess, time

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

        def hog(children, mib):
            pids = []
            for _ in range(children):
                pid = os.fork()
                if pid == 0:
                    held = b"x" * (mib << 20)  # written: every page is resident
                    time.sleep(3)
                    os._exit(0)
                pids.append(pid)
            return sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)

        def spin(children, seconds):
            for _ in range(children):
                if os.fork() == 0:
                    os.setsid()
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        pass
                    os._exit(0)
            return children

        def escape():
        """) + indent(escape_code(marker), " " * 4) + dedent("""\
            return os.getpid()

        def shm(key, create):
            flags = 0o1000 | 0o666 if create else 0  # IPC_CREAT
            return libc.shmget(key, 1 << 20, flags) >= 0

        def fill(folder):
            written = 0
            try:
                for i in range(1000):
                    with open(os.path.join(folder, f"fill{i}"), "wb") as file:
                        for _ in range(4):
                            file.write(b"x" * (1 << 20))
                            written += 1
            except OSError:
                pass
            return written
        """)


# -- against the judge: what a worker writes to it (issue 18) ------------------------------------------
def forged(header: object, data: bytes = b"") -> bytes:
    """A message body with this JSON header and these bytes after it (protocol.py's layout)."""
    text = json.dumps(header).encode()
    return struct.pack(">Q", len(text)) + text + data


def sent(body: bytes) -> bytes:
    """A message body as a worker sends it: its length first."""
    return struct.pack(">Q", len(body)) + body


def declared_gigabytes() -> bytes:
    """2 x 1 GiB of float64 declared in 2 KB."""
    return forged({"value": [{"$array": 0}, {"$array": 1}], "arrays": [["<f8", [1 << 27]]] * 2}, bytes(2000))


def bzip2_npz() -> bytes:
    """The same, as the old format's attack was sent: .npz members compressed with bzip2."""
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f8", "fortran_order": False, "shape": (1 << 27,)})
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_BZIP2) as members:
        for name in ("a0.npy", "a1.npy"):
            members.writestr(name, npy.getvalue() + bytes(1 << 20))
    return forged({"$array": "a0"}, archive.getvalue())


def millions_of_objects() -> bytes:
    """A 40 MB header of empty objects (it took the judge to 2 GiB)."""
    return forged({"value": [{}] * (10 << 20), "arrays": []})


def deep_nesting() -> bytes:
    """A header of 100,000 nested lists (a RecursionError once)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    return struct.pack(">Q", len(deep)) + deep


FORGED_REPLIES = {"gigabytes": declared_gigabytes, "npz": bzip2_npz, "objects": millions_of_objects,
                  "deep": deep_nesting}
"""Message bodies that once cost the judge gigabytes (or a RecursionError): now each is refused before
anything is allocated for it."""
OVERSIZED = struct.pack(">Q", MAX_BYTES + 1)
"""The length of a message over the limit: all a worker needs to send of it."""

_PIPES = dedent("""\
    import base64, fcntl, os, stat, time, zlib

    def pipes():
        \"\"\"The worker's pipes to the judge, found among its files: (requests, replies).\"\"\"
        found = {}
        for fd in range(3, 256):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    found[fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE] = fd
            except OSError:
                pass
        return found[os.O_RDONLY], found[os.O_WRONLY]

    def write(fd, data):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    """)


def reply_code(message: bytes) -> str:
    """Python that writes `message` (as on the wire: sent(body), or OVERSIZED) to the judge from the
    submission's import, where the worker's reply goes."""
    packed = base64.b64encode(zlib.compress(message, 9)).decode()
    return _PIPES + f"write(pipes()[1], zlib.decompress(base64.b64decode({packed!r})))\n"


def blocking_code() -> str:
    """Python that shrinks the judge's request pipe to one page (4 KiB), answers the request it is
    serving (its own import) before it is done, then neither reads nor writes again."""
    return _PIPES + dedent(f"""\
        requests, replies = pipes()
        fcntl.fcntl(requests, 1031, 4096)  # F_SETPIPE_SZ
        write(replies, {encode({"ok": {}})!r})
        while True:
            time.sleep(60)
        """)


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
