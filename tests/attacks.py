"""What the hostile-submission tests share: the attacks a submission makes (processes that try to
outlive their grading, hold a worker's memory or CPU, share memory with the host, fill the disk; forged
replies and a pipe that stops moving, against the judge), finding what survived, calling a sandbox's
attention module, and stopping the server processes a test started.

The attacks are Python source (the class-level proof runs them at a submission's import, the
per-attack tests call them in a worker) or the bytes a worker sends (the protocol's tests decode them).
"""
import base64
import hashlib
import io
import itertools
import json
import os
import signal
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path
from textwrap import dedent, indent

import numpy as np

from grader.sandbox.client import Sandbox
from grader.sandbox.worker.protocol import MAX_BYTES, encode

_markers = itertools.count()


def fresh_marker() -> str:
    """A `sleep` duration no other test process uses: this process's pid and a count, so that tests run
    at once (xdist) never see each other's escapes as their own."""
    return f"9{os.getpid():07d}{next(_markers):03d}.25"


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


# -- across gradings: what a later student may find of an earlier one (issue 29) ---------------------
CARRYOVER_PREFIX = "CARRYOVER-"
"""What every carried-over marker starts with: the scan looks for it, then hashes what follows."""


def carryover_marker() -> str:
    """A marker no other run holds: CARRYOVER_PREFIX and 24 random hex digits."""
    return CARRYOVER_PREFIX + os.urandom(12).hex()


def raising_code(marker: str) -> str:
    """Python that raises at import with `marker` in its message, which the scorecard then quotes in
    every test of the component, public and hidden (a file that fails to import fails them all)."""
    return f"raise RuntimeError({marker!r})\n"


def _digest(marker: str) -> str:
    return hashlib.sha256(marker.removeprefix(CARRYOVER_PREFIX).encode()).hexdigest()


def carryover_scan_code(marker: str) -> str:
    """Python that, at import, looks for `marker` in all of its process's readable memory (/proc/self/maps,
    read with process_vm_readv) and in every readable file under /tmp, /var/tmp, /dev/shm and its home,
    then raises "CARRYOVER{json}" saying what it found: `found` (memory, files), and its controls.

    It never holds the marker itself: it holds the prefix and a hash of the rest, and hashes what follows
    each copy of the prefix, in ASCII, UTF-16 and UTF-32 (a str of Python's). Its controls prove the scan
    sees what is there: a probe made the same way, built at run time in its memory and written to a file of
    its home, must be found in each (`probe`), `mebibytes` says how much memory it read, and `forked`
    whether its process is a fork of a grading process's (so holds that process's memory: the judge's
    modules are loaded) rather than a launched interpreter, where the scan would prove nothing."""
    probe = carryover_marker()
    return dedent(f"""\
        import ctypes, hashlib, json, os, sys

        PREFIX, WIDTH, CHUNK = {CARRYOVER_PREFIX!r}, {len(marker) - len(CARRYOVER_PREFIX)}, 8 << 20
        WANTED = {{{_digest(marker)!r}: "found", {_digest(probe)!r}: "probe"}}
        NEEDLES = [(PREFIX.encode(codec), codec, len(PREFIX.encode(codec)) // len(PREFIX))
                   for codec in ("ascii", "utf-16-le", "utf-32-le")]
        seen = {{"found": {{"memory": 0, "files": 0}}, "probe": {{"memory": 0, "files": 0}}, "mebibytes": 0}}

        def search(data, where):
            for needle, codec, width in NEEDLES:
                at = data.find(needle)
                while at >= 0:
                    tail = data[at + len(needle):at + len(needle) + WIDTH * width]
                    try:
                        name = WANTED.get(hashlib.sha256(tail.decode(codec).encode()).hexdigest())
                    except UnicodeDecodeError:
                        name = None
                    if name:
                        seen[name][where] += 1
                    at = data.find(needle, at + 1)

        libc = ctypes.CDLL(None, use_errno=True)
        libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                                          ctypes.c_ulong, ctypes.c_ulong]
        libc.process_vm_readv.restype = ctypes.c_ssize_t

        class Span(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("size", ctypes.c_size_t)]

        def read(at, size):
            # process_vm_readv on itself: no fault on a page not there (a file mapped past its end), and
            # open to a worker that is not dumpable, unlike /proc/self/mem
            buffer = ctypes.create_string_buffer(size)
            local, remote = Span(ctypes.addressof(buffer), size), Span(at, size)
            done = libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if done < 0:
                raise OSError(ctypes.get_errno(), "process_vm_readv")
            return buffer.raw[:done]

        def memory():
            with open("/proc/self/maps") as maps:
                lines = maps.read().splitlines()
            for line in lines:
                fields = line.split()
                if "r" not in fields[1] or fields[-1] in ("[vvar]", "[vvar_vclock]", "[vsyscall]"):
                    continue
                start, end = (int(x, 16) for x in fields[0].split("-"))
                tail = b""
                for at in range(start, end, CHUNK):
                    try:
                        data = read(at, min(CHUNK, end - at))
                    except OSError:
                        break
                    seen["mebibytes"] += len(data) / 2**20
                    search(tail + data, "memory")
                    tail = data[-4 * (len(PREFIX) + WIDTH):]

        def files():
            for top in {{"/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~")}}:
                for folder, _, names in os.walk(top):
                    for name in names:
                        path = os.path.join(folder, name)
                        try:
                            if not os.path.islink(path) and os.path.isfile(path):
                                with open(path, "rb") as file:
                                    search(file.read(64 << 20), "files")
                        except OSError:
                            pass

        probe = PREFIX + "".join(reversed({probe.removeprefix(CARRYOVER_PREFIX)[::-1]!r}))
        with open(os.path.join(os.path.expanduser("~"), "probe"), "w") as file:
            file.write(probe)
        memory()
        files()
        seen["mebibytes"] = round(seen["mebibytes"])
        seen["forked"] = "grader.sandbox.client" in sys.modules  # the judge's module: forked from a grading
        raise RuntimeError("CARRYOVER" + json.dumps(seen))
        """)


def carryover_report(message: str) -> dict:
    """What carryover_scan_code's worker said, from a test's message."""
    return json.loads(message[message.index("CARRYOVER{") + len("CARRYOVER"):message.rindex("}") + 1])
