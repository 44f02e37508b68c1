"""The hostile submissions a class rehearsal plants among the students (`grader rehearse`), and the
class-level proofs in tests/ use: processes that try to outlive their grading, and a pair of
submissions where an earlier student's data would show in a later one's (issue 29). Each is Python
source a submission runs at import; `survivors` and `carryover_report` read what they left.
"""
import hashlib
import itertools
import json
import os
from pathlib import Path
from textwrap import dedent

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
