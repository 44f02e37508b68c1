"""Messages across the sandbox boundary: data only, never pickle, and bounded before they are allocated.

A message is an 8-byte big-endian length, then a JSON header (length-prefixed too), then the raw
bytes of the message's arrays, each at an offset aligned to ALIGN. The header is
{"value": ..., "arrays": [[dtype, shape], ...]}: in the value, an array stands as {"$array": i}
(the i-th of "arrays"), a worker-side object as {"$handle": id}, and tuples travel as
{"$tuple": [...]}, so (out, weights) comes back as a tuple. Nothing in a message can execute code
when read, and nothing is allocated that the message does not hold: the reader refuses a message
longer than MAX_BYTES before reading it, a header longer than MAX_HEADER_BYTES or nested deeper
than MAX_DEPTH, a dtype other than DTYPES' plain numbers and booleans, and shapes whose bytes do not
add up to exactly the bytes that came. What a reader allocates is the message itself (its arrays
are views of it) and the JSON's objects.
"""
import io
import json
import math
import struct
from typing import Any

import numpy as np

MAX_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 1024 * 1024
"""A header holds names, numbers and the arrays' shapes (never their data): 7.5 KB at most in a whole
grade of the correct example."""
MAX_DEPTH = 32
"""Nesting of lists, tuples and dicts in one message: results and fixtures are a few levels deep."""
ALIGN = 16
DTYPES = frozenset(np.dtype(name).str for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128"))
"""What arrays may hold: the numbers torch tensors hold, in this machine's byte order."""
LENGTH = struct.Struct(">Q")
"""What each message, and its header, starts with: its length in bytes."""
PLAIN = frozenset({type(None), bool, int, float, str})
"""The exact types of values that cross as themselves: each side's walkers take them first, by type
alone (thousands of values a grade; a Handle, an int subclass, is not one of them)."""


class ProtocolError(RuntimeError):
    """A malformed, oversized or truncated message."""


class Handle(int):
    """A reference to an object that lives in the worker (a module, an optimizer, ...), and what
    kind of object it is (for messages: "a generator")."""

    kind: str

    def __new__(cls, value: int, kind: str = "an object") -> "Handle":
        handle = super().__new__(cls, value)
        handle.kind = kind
        return handle


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def encode(value: Any) -> bytes:
    """One message, length included: the JSON structure, then every array's bytes."""
    arrays: list[np.ndarray] = []

    def pack(v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ProtocolError(f"nested deeper than {MAX_DEPTH} levels")
        if type(v) in PLAIN:
            return v
        if isinstance(v, Handle):
            return {"$handle": int(v), "kind": v.kind}
        if isinstance(v, np.ndarray):
            if v.dtype.str not in DTYPES:
                raise TypeError(f"an array of {v.dtype} cannot cross the boundary")
            arrays.append(v if v.flags.c_contiguous else v.copy(order="C"))  # 0-d stays 0-d
            return {"$array": len(arrays) - 1}
        if isinstance(v, tuple):
            return {"$tuple": [pack(x, depth + 1) for x in v]}
        if isinstance(v, list):
            return [pack(x, depth + 1) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise TypeError("only str keys cross the boundary")
            return {k: pack(x, depth + 1) for k, x in v.items()}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (np.generic,)):
            return v.item()
        raise TypeError(f"{type(v).__name__} cannot cross the boundary")

    packed = pack(value, 0)
    header = json.dumps({"value": packed, "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]}).encode()
    if len(header) > MAX_HEADER_BYTES:
        raise ProtocolError(f"a header of {len(header)} bytes exceeds {MAX_HEADER_BYTES}")
    body = io.BytesIO()
    body.write(LENGTH.pack(len(header)) + header)
    for array in arrays:
        body.write(bytes(_aligned(body.tell()) - body.tell()))
        body.write(array.data)
    if body.tell() > MAX_BYTES:
        raise ProtocolError(f"message of {body.tell()} bytes exceeds {MAX_BYTES}")
    return LENGTH.pack(body.tell()) + body.getvalue()


def decode(body: bytearray | bytes) -> Any:
    """The value encode() wrote; ProtocolError for anything else, before allocating for it."""
    if len(body) < LENGTH.size:
        raise ProtocolError("a message shorter than its header's length")
    (header_length,) = LENGTH.unpack_from(body)
    if header_length > min(MAX_HEADER_BYTES, len(body) - LENGTH.size):
        raise ProtocolError(f"a header of {header_length} bytes in a message of {len(body)}")
    try:
        header = json.loads(bytes(body[LENGTH.size:LENGTH.size + header_length]))
        value, layout = header["value"], header["arrays"]
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise ProtocolError(f"malformed header: {error!r}"[:200]) from None
    arrays = _arrays(body, LENGTH.size + header_length, layout)

    def unpack(v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ProtocolError(f"nested deeper than {MAX_DEPTH} levels")
        kind = type(v)  # what json.loads makes: exactly list, dict, str, int, float, bool, None
        if kind is list:
            return [unpack(x, depth + 1) for x in v]
        if kind is dict:
            keys = len(v)
            if keys == 1 and "$array" in v and type(v["$array"]) is int and 0 <= v["$array"] < len(arrays):
                return arrays[v["$array"]]
            if keys == 2 and "$handle" in v and "kind" in v and type(v["$handle"]) is int:
                return Handle(v["$handle"], str(v["kind"]))
            if keys == 1 and "$tuple" in v and type(v["$tuple"]) is list:
                return tuple(unpack(x, depth + 1) for x in v["$tuple"])
            return {k: unpack(x, depth + 1) for k, x in v.items()}
        return v

    return unpack(value, 0)


def _arrays(body: bytearray | bytes, offset: int, layout: Any) -> list[np.ndarray]:
    """The arrays `layout` declares, as views of `body`, once their sizes add up to the bytes there."""
    if not isinstance(layout, list):
        raise ProtocolError("malformed header: no list of arrays")
    views = []
    for entry in layout:
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in DTYPES
                and isinstance(entry[1], list) and len(entry[1]) <= MAX_DEPTH
                and all(type(n) is int and n >= 0 for n in entry[1])):
            raise ProtocolError(f"an array declared as {str(entry)[:80]}")
        dtype, shape = np.dtype(entry[0]), tuple(entry[1])
        offset = _aligned(offset)
        size = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
        if offset + size > len(body):
            raise ProtocolError("the arrays declared are larger than the message")
        views.append(np.frombuffer(body, dtype, math.prod(shape), offset).reshape(shape))
        offset += size
    if offset != len(body):
        raise ProtocolError("bytes left after the last array")
    return views


def send(stream: io.RawIOBase, value: Any) -> None:
    """Write one message to an unbuffered binary stream (blocking: the worker's side)."""
    data = memoryview(encode(value))
    while data:
        data = data[stream.write(data):]


def read_message(stream: io.RawIOBase) -> bytearray:
    """Read one message's body (blocking); its length is checked before anything is allocated for it."""
    (length,) = LENGTH.unpack(_read_exactly(stream, bytearray(LENGTH.size)))
    if length > MAX_BYTES:
        raise ProtocolError(f"message of {length} bytes exceeds {MAX_BYTES}")
    return _read_exactly(stream, bytearray(length))


def receive(stream: io.RawIOBase) -> Any:
    """Read and decode one message (blocking: the worker's side)."""
    return decode(read_message(stream))


def _read_exactly(stream: io.RawIOBase, buffer: bytearray) -> bytearray:
    view, done = memoryview(buffer), 0
    while done < len(buffer):
        n = stream.readinto(view[done:done + (1 << 20)])
        if not n:
            raise EOFError("the other side closed the channel")
        done += n
    return buffer
