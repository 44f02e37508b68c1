"""The uids workers run as ("root" and "setuid" modes): each worker a uid no process uses, among those
this machine (or its user namespace) maps.
"""
import functools
import itertools
import os
from pathlib import Path

from .processes import uid_of

_UID_BASE, _UID_SPAN = 1 << 30, 1 << 26  # pid (< 2^22) * 16 + a counter: unique to one worker
_NOGROUP = 65534
_OVERFLOW = frozenset({0, 65534, 65535})  # root, nobody, and the overflow uid (what unmapped ones show as)
_uids = itertools.count()


def _id_ranges(id_map: str) -> list[range]:
    """The ids a user namespace maps (/proc/self/uid_map: "inside outside count" per line)."""
    ranges = []
    for line in id_map.splitlines():
        inside, _, count = map(int, line.split())
        ranges.append(range(inside, inside + count))
    return ranges


def uid_pool(uid_map: str) -> range | None:
    """The uids workers get, among those mapped: 2^30 + 2^26 where all are (a machine, a container
    sharing the host's), else the upper half of the largest range (a rootless or user-namespaced
    container maps 65536: the lower half is left to the image's own users); None if too few."""
    ranges = _id_ranges(uid_map)
    if any(_UID_BASE in r and _UID_BASE + _UID_SPAN - 1 in r for r in ranges):
        return range(_UID_BASE, _UID_BASE + _UID_SPAN)
    largest = max(ranges, key=len, default=range(0))
    pool = range(largest.start + len(largest) // 2, largest.stop)
    return pool if len(pool) >= 64 else None


@functools.cache
def mapped_pool() -> range | None:
    """The uids workers get here (uid_pool of this process's user namespace's map)."""
    return uid_pool(Path("/proc/self/uid_map").read_text())


@functools.cache
def worker_gid() -> int:
    """nogroup where this user namespace maps it, else a gid of the worker's pool."""
    ranges = _id_ranges(Path("/proc/self/gid_map").read_text())
    if any(_NOGROUP in r for r in ranges):
        return _NOGROUP
    pool = uid_pool(Path("/proc/self/gid_map").read_text())
    return pool.stop - 1 if pool else 0


def pool_uids() -> list[int]:
    """Where this judge's workers look for a uid first: its pid and a counter (a judge runs one
    worker at a time; 16 sandboxes of one process may overlap), within the pool."""
    pool = mapped_pool()
    start = (os.getpid() << 4 | next(_uids) & 15) % len(pool)
    return [uid for uid in (pool[(start + step) % len(pool)] for step in range(64)) if uid not in _OVERFLOW]


def worker_uid() -> int:
    """A uid no process uses now: in the 2^30 pool, the first place tried is this worker's alone;
    in a container's smaller pool, two judges may meet, and a uid in use is passed over."""
    candidates = pool_uids()
    if len(mapped_pool()) >= _UID_SPAN:
        return candidates[0]
    in_use = {uid_of(entry) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    return next((uid for uid in candidates if uid not in in_use), candidates[0])
