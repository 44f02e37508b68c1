"""The submission as the judge sees it: proxies whose every call runs in the sandboxed worker.

Tests hand torch tensors in and get torch tensors back; in between they travel as numpy
arrays through the protocol. Objects built by the student's code (modules) stay in the worker
and are driven through `Remote` handles.
"""
from typing import Any

import numpy as np
import torch

from .results import Failed
from .sandbox.client import Sandbox
from .sandbox.clocks import Allowance
from .sandbox.worker.messages import Op
from .sandbox.worker.protocol import PLAIN, Handle
from .spec import BUDGETS

REAL_KINDS = "biuf"
"""numpy's kinds of bool, int, unsigned and float arrays: what tensors may come back as."""


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
    return {"op": Op.CALL, "target": target, "args": list(args), "kwargs": kwargs}


class Student:
    """Calls into the submission, each bounded by the current test's allowance (CPU seconds of the
    worker, and a wall-clock backstop: Sandbox.allowance)."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self.allowance: Allowance | None = None

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
        """Send one request; its reply."""
        return self.sandbox.request(to_wire(message), self.allowance or BUDGETS.call)

    def manual_seed(self, seed: int) -> None:
        """torch.manual_seed(seed) in the worker: the random draws of the next calls follow from it."""
        self.request(call_message("torch.manual_seed", [int(seed)], {}))

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
        """Forget every object the worker holds for us."""
        self.sandbox.request({"op": Op.RESET}, BUDGETS.reset)


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
        reply = self.student.request({"op": Op.GETATTR, "handle": self.handle, "name": name})
        return self.student.from_wire(reply["result"])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.method("__call__", *args, **kwargs)

    def grad(self, args: list, kwargs: dict | None = None, **options: Any) -> tuple:
        """Forward and backward through this module (see Student.grad); params default to its own."""
        options.setdefault("params_of", self)
        return self.student.grad([self.handle, "__call__"], args, kwargs, **options)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.method("state_dict"))

    def load_state_dict(self, state: dict[str, torch.Tensor], **kwargs: Any) -> None:
        self.method("load_state_dict", dict(state), **kwargs)

    def to(self, dtype: torch.dtype) -> "Remote":
        self.method({torch.float64: "double", torch.float32: "float"}[dtype])
        return self

    def train(self, mode: bool = True) -> "Remote":
        self.method("train", mode)
        return self

    def eval(self) -> "Remote":
        return self.train(False)
