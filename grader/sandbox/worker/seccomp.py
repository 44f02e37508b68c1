"""A seccomp filter, in plain ctypes, that takes the network and SysV IPC away from the worker.

Installed by jail.py in every confined mode, after no_new_privs and before torch or the submission
are imported. It matters most in "setuid" mode, which has no network namespace (a container
without CAP_SYS_ADMIN, e.g. Gradescope's, whose network stays up while grading): socket(2) for any
family but AF_UNIX fails with EACCES; io_uring, which can open sockets without socket(2), is
refused outright; so are shmget, semget, msgget and mq_open, which would make an object that
outlives the worker where it shares the host's IPC namespace ("setuid" mode: a message for a later
worker, or another student's); so are the system calls of another ABI (x32, or 32-bit int 0x80 on x86-64),
which would get round a filter written for the native numbers. The filter is inherited by every
process the worker starts and cannot be removed.
"""
import ctypes
import ctypes.util
import errno
import platform
import socket
import struct

_ARCHES = {  # machine: (AUDIT_ARCH_*, socket, (io_uring_setup, shmget, semget, msgget, mq_open))
    "x86_64": (0xC000003E, 41, (425, 29, 64, 68, 240)),
    "aarch64": (0xC00000B7, 198, (425, 194, 190, 186, 180)),
}
_X32_BIT = 0x40000000
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg 0's low half: little-endian)


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return platform.machine() in _ARCHES


def program(machine: str) -> bytes:
    """The filter for `machine` as BPF instructions (struct sock_filter: u16 code, u8 jt, u8 jf, u32 k)."""
    arch, socket_nr, denied = _ARCHES[machine]
    steps = [  # (code, where to go if true, where if false, k): an index of steps, or a label
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 0, "deny", arch),          # another ABI
        (_LD_ABS, 0, 0, _NR),
        (_JGE, "deny", 0, _X32_BIT),      # x32 system calls
        *((_JEQ, "deny", 0, number) for number in denied),
        (_JEQ, 0, "allow", socket_nr),    # anything but socket(2) is allowed
        (_LD_ABS, 0, 0, _ARG0),
        (_JEQ, "allow", "deny", socket.AF_UNIX),  # socket(AF_UNIX, ...) only
        (_RET, 0, 0, _ALLOW),
        (_RET, 0, 0, _ERRNO | errno.EACCES),
    ]
    labels = {"allow": len(steps) - 2, "deny": len(steps) - 1}

    def skip(at: int, target: int | str) -> int:  # a jump counts the instructions it skips
        return labels[target] - at - 1 if isinstance(target, str) else target

    return b"".join(struct.pack("=HBBI", code, skip(at, yes), skip(at, no), k)
                    for at, (code, yes, no, k) in enumerate(steps))


def deny_network() -> None:
    """Install the filter in this process (no_new_privs must be set already)."""
    code = ctypes.create_string_buffer(program(platform.machine()))
    fprog = _Program(len(code.raw) // 8, ctypes.addressof(code))
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
