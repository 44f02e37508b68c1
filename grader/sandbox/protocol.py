"""Messages across the sandbox boundary: data only, never pickle.

A message is an 8-byte big-endian length, then a JSON header (length-prefixed too), then an
.npz archive of the message's arrays, read back with allow_pickle=False. In the JSON, an array
stands as {"$array": name} and a worker-side object as {"$handle": id}; tuples travel as
{"$tuple": [...]}, so (out, weights) comes back as a tuple. Nothing in a message can execute
code when read, and a message larger than MAX_BYTES is refused.
"""
import io
import json
import os
import select
import struct
import time
from typing import Any

import numpy as np

MAX_BYTES = 64 * 1024 * 1024
TOO_MUCH_OUTPUT = "TooMuchOutput"
"""The error type the worker reports when the student's output filled the capped log."""
_LENGTH = struct.Struct(">Q")


class ProtocolError(RuntimeError):
    """A malformed, oversized or truncated message."""


class Deadline(RuntimeError):
    """The other side did not answer in time."""


class Handle(int):
    """A reference to an object that lives in the worker (a module, an optimizer, ...), and what
    kind of object it is (for messages: "a generator")."""

    kind: str

    def __new__(cls, value: int, kind: str = "an object") -> "Handle":
        handle = super().__new__(cls, value)
        handle.kind = kind
        return handle


def encode(value: Any) -> bytes:
    """One message: JSON structure plus an .npz of every array in it."""
    arrays: dict[str, np.ndarray] = {}

    def pack(v: Any) -> Any:
        if isinstance(v, Handle):
            return {"$handle": int(v), "kind": v.kind}
        if isinstance(v, np.ndarray):
            name = f"a{len(arrays)}"
            arrays[name] = v
            return {"$array": name}
        if isinstance(v, tuple):
            return {"$tuple": [pack(x) for x in v]}
        if isinstance(v, list):
            return [pack(x) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise TypeError("only str keys cross the boundary")
            return {k: pack(x) for k, x in v.items()}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (np.generic,)):
            return v.item()
        raise TypeError(f"{type(v).__name__} cannot cross the boundary")

    header = json.dumps(pack(value)).encode()
    buffer = io.BytesIO()
    if arrays:
        np.savez(buffer, **arrays)
    body = _LENGTH.pack(len(header)) + header + buffer.getvalue()
    if len(body) > MAX_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes exceeds {MAX_BYTES}")
    return _LENGTH.pack(len(body)) + body


def decode(body: bytes) -> Any:
    """The value encode() wrote; arrays are read with allow_pickle=False."""
    (header_length,) = _LENGTH.unpack_from(body)
    header = json.loads(body[_LENGTH.size:_LENGTH.size + header_length])
    rest = body[_LENGTH.size + header_length:]
    arrays = {}
    if rest:
        with np.load(io.BytesIO(rest), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}

    def unpack(v: Any) -> Any:
        if isinstance(v, list):
            return [unpack(x) for x in v]
        if isinstance(v, dict):
            if set(v) == {"$array"}:
                return arrays[v["$array"]]
            if set(v) == {"$handle", "kind"}:
                return Handle(v["$handle"], str(v["kind"]))
            if set(v) == {"$tuple"}:
                return tuple(unpack(x) for x in v["$tuple"])
            return {k: unpack(x) for k, x in v.items()}
        return v

    return unpack(header)


def send(fd: int, value: Any) -> None:
    """Write one message to a file descriptor."""
    data = memoryview(encode(value))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def receive(fd: int, deadline: float | None = None) -> Any:
    """Read one message; Deadline if it has not all arrived by `deadline` (time.monotonic())."""
    (length,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size, deadline))
    if length > MAX_BYTES:
        raise ProtocolError(f"message of {length} bytes exceeds {MAX_BYTES}")
    try:
        return decode(_read_exactly(fd, length, deadline))
    except (ValueError, KeyError, struct.error) as error:
        raise ProtocolError(f"malformed message: {error}") from error


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, remaining = [], n
    while remaining:
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0 or not select.select([fd], [], [], timeout)[0]:
                raise Deadline("no answer in time")
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
