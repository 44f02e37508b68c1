"""The worker's confinement, before it imports the submission.

In the confined modes the sandbox's template (template.py) builds the new root once (build_root,
enter_root) and each worker it forks confines itself (fresh_home, confine) before it serves; in "plain"
mode a worker is started as `python -m <package>.jail CONFINEMENT_JSON WORKER_ARGS...` (see ../launch.py),
sets its limits and runs worker.main in the same process:

- "root" (the judge runs as root; started inside new mount, network, IPC and PID namespaces by
  `unshare`): a new root from read-only bind mounts of what Python and torch need (no
  /home, /root, /tmp of the host, no grader or reference; read-only, /tmp too), a home of its own on a
  small tmpfs (Limits.scratch_bytes: its TMPDIR too), its own SysV IPC, a fresh /proc of the PID
  namespace; chroot into it, then become the
  worker's own unprivileged uid with no way back (no_new_privs, no capabilities), set to die with
  its parent again (the uid change cleared that).
- "userns" (not root, or root of a user namespace that maps no other uid; started by `unshare
  --user --map-root-user` with the same namespaces): the same new root, then every capability
  dropped (the bounding set too), so that the masks cannot be unmounted nor the chroot left.
- "setuid" (root, but namespaces refused): the unprivileged uid, no network (seccomp.py), and
  where the kernel has Landlock, no files but those it needs and no other process (landlock.py).
- "plain": nothing but the limits below.

The resource limits (limits.py) are set here, in the worker, first.

Before anything else, the worker takes the judge's pipes (its stdin and stdout) as private files,
and points stdout at its log: nothing the student's code prints reaches the judge.
"""
import ctypes
import ctypes.util
import errno
import functools
import io
import json
import os
import select
import signal
import sys
from dataclasses import dataclass, field

from . import landlock, seccomp
from .limits import Limits

SANDBOX = "/sandbox"
"""Inside the new root: SANDBOX/submission (read-only) and SANDBOX/home (writable, the working folder)."""
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_MNT_DETACH = 2
_MS_PRIVATE = 1 << 18
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = \
    0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_KEPT = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_NOATIME | _MS_NODIRATIME | _MS_RELATIME
"""Flags of a mount that a bind remount keeps: a user namespace may not clear those of the host's."""
_ST_RELATIME = 4096  # statvfs's name for it
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_DEVICES = ("null", "zero", "full", "random", "urandom")


@dataclass
class Confinement:
    """What the judge asks of one worker (sent as JSON on the command line)."""

    mode: str  # "root", "userns", "setuid" or "plain"
    root: str = ""  # an empty folder of the host that becomes "/" ("root" and "userns" modes)
    read_only: list[str] = field(default_factory=list)  # host paths bound at the same place (the worker's
    # code among them: Python finds the rest of its package where it found jail.py)
    masked: list[str] = field(default_factory=list)  # paths inside read_only hidden by an empty folder
    submission: str = ""  # host folder bound at SANDBOX/submission
    home: str = ""  # host folder (owned by uid): the home in "setuid" mode ("root" mode has a tmpfs)
    uid: int = 0
    gid: int = 0
    limits: Limits = field(default_factory=Limits)

    def to_json(self) -> str:
        return json.dumps({**vars(self), "limits": vars(self.limits)})

    @classmethod
    def from_json(cls, text: str) -> "Confinement":
        data = json.loads(text)
        return cls(**{**data, "limits": Limits(**data["limits"])})


@functools.cache
def _libc() -> ctypes.CDLL:
    """Linux's C library (only "root" and "setuid" modes call it, which only Linux has)."""
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if _libc().mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def _bind(source: str, target: str, writable: bool = False, device: bool = False) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, _MS_BIND | _MS_REC)
    flags = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | _kept_flags(target, device)
    flags |= (0 if device else _MS_NODEV) | (0 if writable else _MS_RDONLY)
    _mount(None, target, None, flags)


def _kept_flags(target: str, device: bool) -> int:
    """The flags of the mount at `target` that a remount must keep (nodev aside for a device)."""
    flags = os.statvfs(target).f_flag
    flags = (flags & ~_ST_RELATIME) | (_MS_RELATIME if flags & _ST_RELATIME else 0)
    return flags & _KEPT & ~(_MS_NODEV if device else 0)


def _inside(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))




def build_root(c: Confinement) -> None:
    """Mount the new root's file system at c.root (in this process's private mount namespace), read-only
    once built: /tmp too, so that no worker can leave a file for the next (each gets a home of its own
    from fresh_home, its TMPDIR)."""
    _mount("tmpfs", c.root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=16m,mode=0755")
    os.makedirs(_inside(c.root, "/tmp"), mode=0o755)  # first: the binds may lie in /tmp
    for path in c.read_only:
        if os.path.islink(path):  # e.g. /bin -> usr/bin on a merged-/usr system
            os.makedirs(os.path.dirname(_inside(c.root, path)), exist_ok=True)
            os.symlink(os.readlink(path), _inside(c.root, path))
        elif os.path.exists(path):
            _bind(path, _inside(c.root, path))
    for path in c.masked:
        target = _inside(c.root, path)
        if os.path.isdir(target):
            _mount("tmpfs", target, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k,mode=0555")
    _bind(c.submission, _inside(c.root, f"{SANDBOX}/submission"))
    os.makedirs(_inside(c.root, f"{SANDBOX}/home"))
    for name in _DEVICES:
        _bind(f"/dev/{name}", _inside(c.root, f"/dev/{name}"), writable=True, device=True)
    os.makedirs(_inside(c.root, "/proc"))
    # hidepid=2: a worker's uid sees its own processes only, not its template ("root" mode: another uid)
    _mount("proc", _inside(c.root, "/proc"), "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=2")
    _mount(None, c.root, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def enter_namespaces(mode: str, *, ipc_only: bool = False) -> None:
    """In this process, what `unshare --mount --propagation private --net --ipc --pid` does before it starts
    a template ("root"), with `--user --map-root-user` too ("userns"): a template forked rather than
    launched (template.fork) enters its namespaces so. The next child is the new PID namespace's first
    process. `ipc_only`: a new IPC namespace alone (a worker's own, within its template's namespaces)."""
    if ipc_only:
        if _libc().unshare(_CLONE_NEWIPC) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWIPC)")
        return
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID
    flags |= _CLONE_NEWUSER if mode == "userns" else 0
    if _libc().unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    if mode == "userns":  # root inside is this uid outside, as --map-root-user maps it
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as map_file:
                map_file.write(text)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)


def enter_root(c: Confinement) -> None:
    """chroot into the new root (for good once the uid is dropped: chroot needs root)."""
    os.chroot(c.root)
    os.chdir("/")


def fresh_home(c: Confinement) -> None:
    """An empty home for the next worker, owned by its uid (in the new root): the last worker's home
    goes, with its files."""
    home = f"{SANDBOX}/home"
    if os.path.ismount(home) and _libc().umount2(home.encode(), _MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), f"umount {home}")
    # A tmpfs: what the worker writes takes memory of its own group, not the host's disk, and goes with it
    _mount("tmpfs", home, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={c.limits.scratch_bytes},nr_inodes=8192,mode=700")
    os.chown(home, c.uid, c.gid)
    os.chdir(home)


def become_worker(c: Confinement) -> None:
    """Drop to c.uid for good."""
    os.setgroups([])
    os.setresgid(c.gid, c.gid, c.gid)
    os.setresuid(c.uid, c.uid, c.uid)  # from root to another uid: every capability goes too


def drop_capabilities() -> None:
    """Give up every capability for good (root of a user namespace keeps its uid: it has no other)."""
    for capability in range(64):
        if _libc().prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    _libc().prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    if _libc().capset(header, (ctypes.c_uint32 * 6)()) != 0:  # effective, permitted, inheritable: none
        raise OSError(ctypes.get_errno(), "capset")


def no_new_privileges() -> None:
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def stay_with_parent(request_fd: int) -> None:
    """Die with the process that started this one (the template; the judge, for a template in "setuid"
    mode): the uid change cleared the parent-death signal (prctl(2)), so set it again; then, in case the
    judge went before that, look at the request pipe (or the template's control socket): the judge is
    the only one at its other end, so it is hung up once the judge is gone (and a process exits its
    files before its children get their signal)."""
    _killed_with_parent()
    poller = select.poll()
    poller.register(request_fd, select.POLLIN)
    if any(events & select.POLLHUP for _, events in poller.poll(0)):
        os._exit(1)


def die_with_parent(parent: int) -> None:
    """Die with `parent`, the process that forked this one: killed when it ends, or now if it has."""
    _killed_with_parent()
    if os.getppid() != parent:
        os._exit(1)


def _killed_with_parent() -> None:
    if _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def take_channel() -> tuple[io.FileIO, io.FileIO]:
    """The judge's pipes (stdin, stdout) as private files, not inherited by what the worker starts;
    stdin then reads nothing and stdout writes to the log (stderr)."""
    requests, replies = io.FileIO(os.dup(0), "rb"), io.FileIO(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return requests, replies


def confine(c: Confinement, requests_fd: int) -> None:
    """A worker's own confinement, once it is in its new root ("root" and "userns" modes): the limits,
    then its uid or its capabilities, no new privileges, no network, Landlock ("setuid" mode). The limits
    this platform refused go to its log (the judge finds them on its own: Limits.refused)."""
    not_set = c.limits.apply(per_uid=c.mode in ("root", "setuid"))
    if not_set:
        print(f"limits not set on this platform: {', '.join(not_set)}", file=sys.stderr, flush=True)
    if c.mode in ("root", "setuid"):  # after the limits: as root it may set hard ones
        become_worker(c)
        stay_with_parent(requests_fd)
    elif c.mode == "userns":
        drop_capabilities()
    if c.mode != "plain":
        no_new_privileges()
        if seccomp.supported():  # elsewhere "setuid" is refused (../modes.py); the others have no network
            seccomp.deny_network()
    if c.mode == "setuid" and landlock.abi():  # the others have a new root and PID namespace
        landlock.restrict([*c.read_only, c.submission], [c.home], [f"/dev/{name}" for name in _DEVICES])


def main(argv: list[str]) -> None:
    """A worker started on its own ("plain" mode: the confined modes fork theirs from template.py)."""
    requests, replies = take_channel()
    confinement = Confinement.from_json(argv[0])
    confine(confinement, requests.fileno())
    from .serve import main as serve  # torch and the submission come only now

    serve(requests, replies, argv[1:], confinement.limits)


if __name__ == "__main__":
    main(sys.argv[1:])
