"""Landlock, in plain ctypes: the worker sees only the files it needs, and no other process.

Applied by jail.py in "setuid" mode (root without namespaces: no new root, no PID namespace), after
no_new_privs and before torch or the submission are imported. Everything the worker opens must lie
below a path it was given: read-only (the system, Python, torch, its code and its copy of the
submission), read-write (its home and a few devices), and of /proc only its own folder, resolved
before the restriction, and the few files that describe the machine (MACHINE). So /proc cannot be
listed and another process's /proc/PID cannot be opened; neither can the host's other files, /tmp or
/dev/shm. Where the kernel has ABI 6 (Linux 6.12), signals to processes outside the worker's domain
(it and what it starts) and abstract Unix sockets made outside it are refused too (its own uid
already keeps it from signalling others). Landlock checks opens, not lookups: whether a path exists
(a PID, by stat) still shows. The restriction is inherited by every process the worker starts and
cannot be lifted.
"""
import ctypes
import ctypes.util
import functools
import os
import sys

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_PATH_BENEATH = 1  # LANDLOCK_RULE_PATH_BENEATH
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | 1 << 14 | 1 << 15  # truncate (ABI 3), ioctl (ABI 5)
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
"""Every file-system right each ABI handles (ABI 2: refer; 3: truncate; 5: ioctl on devices)."""
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
MACHINE = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/sys/devices/system/cpu")
"""What describes the machine, read-only (glibc, OpenMP and torch ask how many CPUs it has)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


@functools.cache
def abi() -> int:
    """The Landlock ABI this kernel offers to this process: 0 where there is none (an old kernel,
    Landlock not enabled at boot, a container's seccomp profile that refuses it, not Linux)."""
    if sys.platform != "linux":
        return 0
    version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return max(version, 0)


def restrict(read_only: list[str], writable: list[str], devices: list[str]) -> None:
    """Confine this process and all it will start to these paths (those that do not exist are left
    out), its own /proc folder and MACHINE; no_new_privs must be set already."""
    version = abi()
    handled = _FS_RIGHTS[max(v for v in _FS_RIGHTS if v <= version)]
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if version >= 6 else 0
    attr = _RulesetAttr(handled, 0, scoped)
    ruleset = _syscall("landlock_create_ruleset", _CREATE_RULESET, ctypes.byref(attr),
                       ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        own = os.path.realpath("/proc/self")  # /proc/PID: "self" would name whoever looks
        rules = [(path, _READ) for path in read_only] + [(path, handled) for path in writable]
        rules += [(path, _READ_FILE | _WRITE_FILE) for path in devices]
        rules += [(path, _READ) for path in (own, *MACHINE)]
        for path, rights in rules:
            _allow(ruleset, path, rights & handled)
        _syscall("landlock_restrict_self", _RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS  # a file takes only the rights of files
        rule = _PathBeneathAttr(rights, fd)
        _syscall(f"landlock_add_rule {path}", _ADD_RULE, ruleset, ctypes.c_int(_PATH_BENEATH),
                 ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def _syscall(what: str, number: int, *args) -> int:
    result = _libc().syscall(number, *args)
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result
