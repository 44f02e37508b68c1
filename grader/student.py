"""The submission as the judge sees it: proxies whose every call runs in the sandboxed worker.

Tests hand torch tensors in and get torch tensors back; in between they travel as numpy
arrays through the protocol. Objects built by the student's code (modules) stay in the worker
and are driven through `Remote` handles.
"""
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch

from .results import Failed
from .sandbox.client import Allowance, Sandbox, StudentError
from .sandbox.protocol import PLAIN, Handle

MAX_CALL_SECONDS = 600.0
"""CPU seconds of a call outside any test's allowance."""
RESET_SECONDS = 5.0
"""CPU seconds the worker gets to forget a test's objects (their __del__ runs then)."""
REAL_KINDS = "biuf"
"""numpy's kinds of bool, int, unsigned and float arrays: what tensors may come back as."""
DEFERRED_MAX = 16
"""Calls whose results the tests never read (seeding the worker, setting a module's mode or dtype, loading
a state dict) wait, at most this many, to go with the next call in one message: a round trip each saved,
thousands a grade."""


def to_wire(value: Any) -> Any:
    if type(value) in PLAIN:
        return value
    if isinstance(value, Remote):
        return value.handle
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (tuple, list)):
        return type(value)(to_wire(v) for v in value)
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    return value


def call_message(target: str | list, args: tuple | list, kwargs: dict) -> dict:
    """The request that runs target(*args, **kwargs) in the worker."""
    return {"op": "call", "target": target, "args": list(args), "kwargs": kwargs}


_ACTIVE: ContextVar["Student | None"] = ContextVar("active_student", default=None)


def settled(run: Callable) -> Callable:
    """run, then the calls it deferred (Student.defer) for the case that runs (`active`): their errors come
    first, replacing a failure the judge found after them, as they would have had each call been sent at
    once. Each example is run so, and so is each body whose errors a test catches to decide what to do
    next (a fallback dtype, a typical input), so that it catches those errors too."""
    @functools.wraps(run)
    def flushed(*args: Any, **kwargs: Any) -> Any:
        student = _ACTIVE.get()
        try:
            result = run(*args, **kwargs)
        except Exception:
            if student is not None:
                student.flush()
            raise
        if student is not None:
            student.flush()
        return result
    return flushed


@contextmanager
def active(student: "Student") -> Iterator[None]:
    """The student whose case runs now: what `settled` flushes."""
    token = _ACTIVE.set(student)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


class Student:
    """Calls into the submission, each bounded by the current test's allowance (CPU seconds of the
    worker, and a wall-clock backstop: Sandbox.allowance)."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self.allowance: Allowance | None = None
        self.deferred: list[dict] = []

    def __repr__(self) -> str:  # shown in hypothesis's falsifying examples
        return "student"

    def from_wire(self, value: Any) -> Any:
        if type(value) in PLAIN:
            return value
        if isinstance(value, Handle):
            return Remote(self, value)
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in REAL_KINDS:  # complex, text, records: never cast into a number
                raise Failed(f"your code returned an array of {value.dtype} values, where real numbers "
                             "(a float, integer or bool tensor) are expected")
            return torch.from_numpy(value)
        if isinstance(value, (tuple, list)):
            return type(value)(self.from_wire(v) for v in value)
        if isinstance(value, dict):
            return {k: self.from_wire(v) for k, v in value.items()}
        return value

    def request(self, message: dict) -> dict:
        """Send one request, after the deferred ones (in one message); its reply."""
        limit = self.allowance or MAX_CALL_SECONDS
        if not self.deferred:
            return self.sandbox.request(to_wire(message), limit)
        requests, self.deferred = [*self.deferred, to_wire(message)], []
        replies = self.sandbox.request({"op": "batch", "requests": requests}, limit)
        if not (type(replies) is list and len(replies) == len(requests)
                and all(type(reply) is dict and "result" in reply for reply in replies)):
            raise StudentError("ReturnValueError", "the worker's reply to a batch of calls is not one reply "
                                                   "a call")
        for reply in replies[:-1]:  # checked as if it were read (a complex array fails, say)
            self.from_wire(reply["result"])
        return replies[-1]

    def defer(self, message: dict) -> None:
        """Send this request with the next one: the worker runs them in order, stopping at the first
        that raises, whose error the next request raises. Errors therefore come in the same order; what is
        left when a body ends is flushed by `settled`."""
        self.deferred.append(to_wire(message))
        if len(self.deferred) >= DEFERRED_MAX:
            self.flush()

    def flush(self) -> None:
        """Send the deferred requests now."""
        if self.deferred:
            self.from_wire(self.request(self.deferred.pop())["result"])

    def manual_seed(self, seed: int) -> None:
        """torch.manual_seed(seed) in the worker, deferred: the next call's random draws follow from it."""
        self.defer(call_message("torch.manual_seed", [seed], {}))

    def call(self, target: str | list, *args: Any, **kwargs: Any) -> Any:
        """target(*args, **kwargs) in the worker, e.g. call("attention.causal_mask", 4)."""
        reply = self.request(call_message(target, args, kwargs))
        return self.from_wire(reply["result"])

    def grad(self, target: str | list, args: list, kwargs: dict | None = None, *,
             grad_outputs: list, wrt: tuple = (), params_of: "Remote | None" = None) -> tuple:
        """Call, then backward with `grad_outputs`; returns (result, input grads, param grads).

        wrt names the arguments (positions or keyword names) whose gradients come back.
        """
        reply = self.request({
            **call_message(target, args, kwargs or {}),
            "grad_inputs": list(wrt), "grad_outputs": list(grad_outputs),
            "params_of": params_of,
        })
        grads = self.from_wire(reply["grads"])
        inputs = {int(k) if k.isdigit() else k: v for k, v in grads["inputs"].items()}
        return self.from_wire(reply["result"]), inputs, grads["params"]

    def reset(self) -> None:
        """Forget every object the worker holds for us (and the requests deferred by a case cut short)."""
        self.deferred = []
        self.sandbox.request({"op": "reset"}, RESET_SECONDS)


class Remote:
    """An object that lives in the worker (a module the student's code built)."""

    def __init__(self, student: Student, handle: Handle):
        self.student, self.handle = student, handle

    def __repr__(self) -> str:
        return "remote"

    @property
    def kind(self) -> str:
        """What the object is (e.g. "a generator"), as the worker says."""
        return f"{self.handle.kind} (an object of your code's)"

    def method(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.student.call([self.handle, name], *args, **kwargs)

    def attribute(self, name: str) -> Any:
        """The value of one attribute, e.g. remote.attribute("training")."""
        reply = self.student.request({"op": "getattr", "handle": self.handle, "name": name})
        return self.student.from_wire(reply["result"])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.method("__call__", *args, **kwargs)

    def grad(self, args: list, kwargs: dict | None = None, **options: Any) -> tuple:
        """Forward and backward through this module (see Student.grad); params default to its own."""
        options.setdefault("params_of", self)
        return self.student.grad([self.handle, "__call__"], args, kwargs, **options)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.method("state_dict"))

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.defer("load_state_dict", dict(state))

    def defer(self, name: str, *args: Any, **kwargs: Any) -> "Remote":
        """Call a method whose result the tests do not read (the module itself, load_state_dict's keys),
        with the next call: Student.defer."""
        self.student.defer(call_message([self.handle, name], args, kwargs))
        return self

    def to(self, dtype: torch.dtype) -> "Remote":
        return self.defer({torch.float64: "double", torch.float32: "float"}[dtype])

    def train(self, mode: bool = True) -> "Remote":
        return self.defer("train", mode)

    def eval(self) -> "Remote":
        return self.train(False)
