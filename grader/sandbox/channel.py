"""The judge's end of a worker's pipes: every read and write has a deadline, on every platform (a worker
that stops reading or writing never blocks the judge), and a wait can be interrupted (Ctrl-C) within
WAKE_SECONDS. On POSIX the pipes are non-blocking and each wait is a poll() (PollChannel); on Windows,
which cannot poll a pipe, threads do the blocking I/O (Channel), which costs a few thread switches per
message. Messages are protocol.py's, read and checked as they come.
"""
import io
import os
import queue
import select
import threading
import time
from typing import Any

from .worker.protocol import LENGTH, MAX_BYTES, ProtocolError, decode, encode, read_message

WAKE_SECONDS = 0.25


class Deadline(RuntimeError):
    """The other side did not answer in time."""


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
        self._length = bytearray(LENGTH.size)
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
            if self._done == LENGTH.size:
                (length,) = LENGTH.unpack(self._length)
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
    """The judge's end of a worker's pipes: PollChannel where pipes can be polled, else (Windows, whose
    select module has no poll; the Windows imitation, which takes it away) Channel."""
    return (PollChannel if hasattr(select, "poll") else Channel)(to_process, from_process)


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
