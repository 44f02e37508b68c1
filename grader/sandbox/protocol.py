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

channel() gives the judge's end of a worker's pipes: every read and write it does has a deadline, on
every platform (a worker that stops reading or writing never blocks the judge), and a wait can be
interrupted (Ctrl-C) within WAKE_SECONDS. On POSIX the pipes are non-blocking and each wait is a
poll() (PollChannel); elsewhere threads do the blocking I/O (Channel), which costs a few thread
switches per message: a tenth of a millisecond of the judge's CPU, thousands of times a grade.
"""
import io
import json
import math
import os
import queue
import select
import struct
import sys
import threading
import time
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
WAKE_SECONDS = 0.25
_LENGTH = struct.Struct(">Q")
PLAIN = frozenset({type(None), bool, int, float, str})
"""The exact types of values that cross as themselves: each side's walkers take them first, by type
alone (thousands of values a grade; a Handle, an int subclass, is not one of them)."""


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
    body.write(_LENGTH.pack(len(header)) + header)
    for array in arrays:
        body.write(bytes(_aligned(body.tell()) - body.tell()))
        body.write(array.data)
    if body.tell() > MAX_BYTES:
        raise ProtocolError(f"message of {body.tell()} bytes exceeds {MAX_BYTES}")
    return _LENGTH.pack(body.tell()) + body.getvalue()


def decode(body: bytearray | bytes) -> Any:
    """The value encode() wrote; ProtocolError for anything else, before allocating for it."""
    if len(body) < _LENGTH.size:
        raise ProtocolError("a message shorter than its header's length")
    (header_length,) = _LENGTH.unpack_from(body)
    if header_length > min(MAX_HEADER_BYTES, len(body) - _LENGTH.size):
        raise ProtocolError(f"a header of {header_length} bytes in a message of {len(body)}")
    try:
        header = json.loads(bytes(body[_LENGTH.size:_LENGTH.size + header_length]))
        value, layout = header["value"], header["arrays"]
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise ProtocolError(f"malformed header: {error!r}"[:200]) from None
    arrays = _arrays(body, _LENGTH.size + header_length, layout)

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
    (length,) = _LENGTH.unpack(_read_exactly(stream, bytearray(_LENGTH.size)))
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


class Channel:
    """Messages to and from a process over two pipes, each read and write bounded by a deadline.

    One thread writes what send() queues, another reads one message each time receive() asks for
    one (so no more than one message is ever held unasked). Each thread closes its own pipe when it
    ends (the other side gone, or close()), never while it is still blocked on it.
    """

    def __init__(self, to_process: io.RawIOBase, from_process: io.RawIOBase):
        self._outgoing: queue.Queue[bytes | None] = queue.Queue()
        self._written: queue.Queue[BaseException | None] = queue.Queue()
        self._wanted = threading.Semaphore(0)
        self._incoming: queue.Queue[bytearray | BaseException] = queue.Queue()
        self._closed = False
        self._asked = False  # a read was asked for and its message not yet taken
        threading.Thread(target=self._write_loop, args=(to_process,), daemon=True).start()
        threading.Thread(target=self._read_loop, args=(from_process,), daemon=True).start()

    def send(self, value: Any, deadline: float) -> None:
        """Queue one message and wait until it is written; Deadline if not by `deadline`."""
        self._outgoing.put(encode(value))
        error = _wait(self._written, deadline)
        if error is not None:
            raise error

    def receive(self, deadline: float) -> Any:
        """The next message; Deadline if it has not all arrived by `deadline` (time.monotonic())."""
        if not self._asked:
            self._asked = True
            self._wanted.release()
        body = _wait(self._incoming, deadline)
        self._asked = False
        if isinstance(body, BaseException):
            raise body
        return decode(body)

    def close(self) -> None:
        """Let both threads end (each as soon as it is no longer blocked on its pipe)."""
        self._closed = True
        self._outgoing.put(None)
        self._wanted.release()

    def _write_loop(self, stream: io.RawIOBase) -> None:
        with stream:
            while (data := self._outgoing.get()) is not None:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[stream.write(view):]
                    self._written.put(None)
                except OSError as error:  # the other side closed its end (or died)
                    self._written.put(error)
                    return

    def _read_loop(self, stream: io.RawIOBase) -> None:
        with stream:
            while self._wanted.acquire() and not self._closed:
                try:
                    self._incoming.put(read_message(stream))
                except (OSError, EOFError, ProtocolError) as error:
                    self._incoming.put(error)
                    return


class PollChannel:
    """Channel's interface without threads (POSIX): both pipes non-blocking, each wait a poll() of at
    most WAKE_SECONDS until the deadline. What a send or receive did not finish by its deadline (part
    of a message) is finished by the next one, as Channel's threads would."""

    def __init__(self, to_process: io.RawIOBase, from_process: io.RawIOBase):
        self._out, self._in = to_process, from_process
        for stream in (to_process, from_process):
            os.set_blocking(stream.fileno(), False)
        self._unsent = b""
        self._length = bytearray(_LENGTH.size)
        self._body: bytearray | None = None
        self._done = 0  # bytes read of the length, then of the body
        self._readable, self._writable = select.poll(), select.poll()
        self._readable.register(from_process.fileno(), select.POLLIN)
        self._writable.register(to_process.fileno(), select.POLLOUT)

    def send(self, value: Any, deadline: float) -> None:
        """Write one message; Deadline if it is not all written by `deadline`."""
        data = memoryview(self._unsent + encode(value))
        while data:
            written = self._out.write(data)  # None: the pipe is full
            data = data[written or 0:]
            if data and not written:
                self._unsent = bytes(data)
                _wait_for(self._writable, deadline)
        self._unsent = b""

    def receive(self, deadline: float) -> Any:
        """The next message; Deadline if it has not all arrived by `deadline` (time.monotonic()). Its
        length is checked before anything is allocated for its body."""
        while self._body is None:
            self._done = self._read(self._length, self._done, deadline)
            if self._done == _LENGTH.size:
                (length,) = _LENGTH.unpack(self._length)
                if length > MAX_BYTES:
                    raise ProtocolError(f"message of {length} bytes exceeds {MAX_BYTES}")
                self._body, self._done = bytearray(length), 0
        while self._done < len(self._body):
            self._done = self._read(self._body, self._done, deadline)
        body, self._body, self._done = self._body, None, 0
        return decode(body)

    def _read(self, buffer: bytearray, done: int, deadline: float) -> int:
        """How much of `buffer` is read, once what has come of the rest (1 MiB at most) is: waiting for
        it, if nothing has."""
        n = self._in.readinto(memoryview(buffer)[done:done + (1 << 20)])
        if n == 0:
            raise EOFError("the other side closed the channel")
        if n is None:
            _wait_for(self._readable, deadline)
            return done
        return done + n

    def close(self) -> None:
        for stream in (self._out, self._in):
            stream.close()


def _wait_for(poller: Any, deadline: float) -> None:
    """Wait until the stream `poller` watches is ready (or its other end is closed), WAKE_SECONDS at most
    at a time; Deadline once `deadline` has passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise Deadline("no answer in time")
    poller.poll(min(remaining, WAKE_SECONDS) * 1000)


def channel(to_process: io.RawIOBase, from_process: io.RawIOBase) -> "Channel | PollChannel":
    """The judge's end of a worker's pipes: PollChannel where pipes can be polled, else Channel."""
    return (Channel if sys.platform == "win32" else PollChannel)(to_process, from_process)


def _wait(results: queue.Queue, deadline: float) -> Any:
    """The next item of `results`, waiting in short slices (so that Ctrl-C is seen on every
    platform); Deadline if none has come by `deadline`."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline("no answer in time")
        try:
            return results.get(timeout=min(remaining, WAKE_SECONDS))
        except queue.Empty:
            pass
