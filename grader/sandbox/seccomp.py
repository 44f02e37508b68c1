"""A seccomp filter, in plain ctypes, that takes the network away from the worker.

Installed by jail.py in every confined mode, after no_new_privs and before torch or the submission
are imported. It matters most in "setuid" mode, which has no network namespace (a container
without CAP_SYS_ADMIN, e.g. Gradescope's, whose network stays up while grading): socket(2) for any
family but AF_UNIX fails with EACCES; io_uring, which can open sockets without socket(2), is
refused outright; so are the system calls of another ABI (x32, or 32-bit int 0x80 on x86-64),
which would get round a filter written for the native numbers. The filter is inherited by every
process the worker starts and cannot be removed.
"""
import ctypes
import ctypes.util
import errno
import platform
import socket
import struct

_ARCHES = {  # machine: (AUDIT_ARCH_*, socket, io_uring_setup)
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
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
    arch, socket_nr, io_uring_nr = _ARCHES[machine]
    deny = _ERRNO | errno.EACCES
    steps = [  # (code, jump if true, jump if false, k): jumps count the instructions skipped
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 0, 7, arch),          # another ABI -> deny
        (_LD_ABS, 0, 0, _NR),
        (_JGE, 5, 0, _X32_BIT),      # x32 system calls -> deny
        (_JEQ, 4, 0, io_uring_nr),   # io_uring -> deny
        (_JEQ, 0, 2, socket_nr),     # anything but socket(2) -> allow
        (_LD_ABS, 0, 0, _ARG0),
        (_JEQ, 0, 1, socket.AF_UNIX),  # socket(AF_UNIX, ...) -> allow, any other family -> deny
        (_RET, 0, 0, _ALLOW),
        (_RET, 0, 0, deny),
    ]
    return b"".join(struct.pack("=HBBI", *step) for step in steps)


def deny_network() -> None:
    """Install the filter in this process (no_new_privs must be set already)."""
    code = ctypes.create_string_buffer(program(platform.machine()))
    fprog = _Program(len(code.raw) // 8, ctypes.addressof(code))
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
