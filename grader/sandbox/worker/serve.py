"""The untrusted side: a fresh process that imports the submission and runs calls for the judge.

Run once the process is confined: by a fork of the sandbox's template (template.py) in the confined
modes, by jail.py in "plain" mode (the judge starts `python -P -s -m grader_sandbox.jail
CONFINEMENT_JSON SUBMISSION_DIR [BLOCKED]`, grader_sandbox being the worker's own copy of this
package; see ../launch.py), in the same process, which hands it the judge's pipes. It imports nothing
of the reference or the tests (the `solutions` package is blocked outright, and so are the
submission modules named in BLOCKED, comma-separated), executes each request on the student's code
and answers with data only (see protocol.py). A request names its target as "module.attr" inside the
submission, as a method of an object it holds (a handle), or as one of a few torch builders the
tests use for fixtures (FIXTURES). What docs/spec.md forbids in the exercises (FORBIDDEN) is
replaced, before the submission is imported, by stand-ins that raise.

A request out of time stops with TimeLimit raised in the student's code, where it was, so that the reply
says where: on POSIX when the judge sends SIGXCPU; where there is no SIGXCPU (Windows), the judge gives
each request its CPU seconds (messages.CPU_SECONDS) and the Watchdog raises it once they are used.
"""
import ctypes
import errno
import inspect
import io
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import eager
from .forbidden import forbid
from .limits import Limits
from .loader import import_module, import_package
from .messages import BLOCKED, CPU_SECONDS, READY, TIME_LIMIT, TOO_MUCH_OUTPUT, Op, failed, ok
from .protocol import PLAIN, Handle, ProtocolError, receive, send

FIXTURES = {
    "torch.manual_seed": eager.manual_seed,  # the CPU's generator alone: see eager.py
    "torch.nn.Embedding": torch.nn.Embedding,
    "torch.nn.Linear": torch.nn.Linear,
    "torch.nn.LayerNorm": torch.nn.LayerNorm,
    "torch.nn.Sequential": torch.nn.Sequential,
    "torch.nn.Dropout": torch.nn.Dropout,
}
PACKAGE = "submission"


class TimeLimit(BaseException):
    """Raised in the student's code when its time is up (SIGXCPU, or the Watchdog): the reply then says
    where it was. A BaseException, so that `except Exception` in the student's code lets it through."""


class Blocked(BaseException):
    """A call reached a function the judge found hanging (it stands in for that function)."""


TimeLimit.__name__, Blocked.__name__ = TIME_LIMIT, BLOCKED
_serving = False
"""True while a request runs: SIGXCPU stops the student's code only then (never a reply being sent)."""


def _on_time_limit(number: int, frame: Any) -> None:
    if _serving:
        raise TimeLimit("out of time")


class Watchdog:
    """Raises TimeLimit in the serving thread once the process has used a request's CPU seconds, where no
    SIGXCPU can ask it to (Windows). A thread of its own, since the serving one runs the student's code:
    the exception is set asynchronously (PyThreadState_SetAsyncExc) and raised at the serving thread's next
    bytecode, as a signal handler's would be; a C call that never returns is left to the judge's kill."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()  # the serving one
        self._lock, self._changed = threading.Lock(), threading.Event()
        self._until: float | None = None  # process_time() at which the request is out of time
        threading.Thread(target=self._watch, name="time-limit", daemon=True).start()

    @contextmanager
    def armed(self, seconds: float | None) -> Iterator[None]:
        """While the block runs it may use `seconds` of the process's CPU (no limit when None); a
        TimeLimit still pending at its end is taken back, so that none reaches the code that replies."""
        with self._lock:
            self._until = None if seconds is None else time.process_time() + seconds
        self._changed.set()
        try:
            yield
        finally:
            with self._lock:
                self._until = None
                self._set_exception(None)

    def _watch(self) -> None:
        while True:
            with self._lock:
                left = None if self._until is None else self._until - time.process_time()
                if left is not None and left <= 0:
                    self._until = None
                    self._set_exception(TimeLimit)
            # One busy thread's CPU grows no faster than the wall clock: `left` seconds do not overshoot
            self._changed.wait(None if left is None or left <= 0 else left)
            self._changed.clear()

    def _set_exception(self, error: type[BaseException] | None) -> None:
        """Raise `error` in the serving thread at its next bytecode; None takes a pending one back."""
        pending = ctypes.py_object(error) if error else ctypes.py_object()  # the latter: NULL
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), pending)


def _blocked(message: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise Blocked(message)
    return refuse


class _Refuse:
    """A meta-path finder that refuses the reference solutions, and the submission's `blocked`
    modules (found broken by the judge: they fail at once instead of hanging or flooding again)."""

    def __init__(self, blocked: list[str]):
        self.blocked = {f"{PACKAGE}.{module}" for module in blocked}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "solutions" or name.startswith("solutions."):
            raise ImportError("the reference solutions cannot be imported during grading")
        if name in self.blocked:
            raise ModuleNotFoundError(f"{name.partition('.')[2]}.py could not be imported (see its message)",
                                      name=name)
        return None


class Session:
    """The objects the judge refers to by handle, and how requests run on them."""

    def __init__(self, submission_dir: Path, output_bytes: int):
        self.submission_dir = submission_dir.resolve()
        self.output_bytes = output_bytes
        self.package = import_package(submission_dir, PACKAGE)
        self.objects: dict[int, Any] = {}

    # -- values in and out -------------------------------------------------------------
    def to_torch(self, value: Any) -> Any:
        if type(value) in PLAIN:
            return value
        if isinstance(value, Handle):
            return self.objects[int(value)]
        if isinstance(value, np.ndarray):
            return torch.from_numpy(value.copy())
        if isinstance(value, tuple):
            return tuple(self.to_torch(v) for v in value)
        if isinstance(value, list):
            return [self.to_torch(v) for v in value]
        if isinstance(value, dict):
            return {k: self.to_torch(v) for k, v in value.items()}
        return value

    def to_data(self, value: Any) -> Any:
        if type(value) in PLAIN:
            return value
        if isinstance(value, torch.Tensor) and value.layout is torch.strided and not value.is_quantized \
                and value.device.type == "cpu":
            return value.detach().resolve_conj().resolve_neg().numpy().copy()
        if isinstance(value, (bool, int, float, str, type(None))):
            return value
        if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
            return type(value)(self.to_data(v) for v in value)
        if isinstance(value, tuple):  # named tuples such as load_state_dict's result
            return tuple(self.to_data(v) for v in value)
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: self.to_data(v) for k, v in value.items()}
        if isinstance(value, torch.dtype):
            return str(value)
        handle = Handle(id(value), _kind(value))
        self.objects[int(handle)] = value
        return handle

    # -- requests ----------------------------------------------------------------------
    def resolve(self, target: Any) -> Any:
        if isinstance(target, list):  # [handle, "method"]
            obj, name = self.objects[int(target[0])], target[1]
            return obj if name == "__call__" else getattr(obj, name)
        if target in FIXTURES:
            return FIXTURES[target]
        module, _, attr = target.partition(".")
        value: Any = import_module(self.package, module)
        for part in attr.split(".") if attr else ():
            value = getattr(value, part)
        return value

    def call(self, request: dict) -> dict:
        fn = self.resolve(request["target"])
        args = self.to_torch(request.get("args", []))
        kwargs = self.to_torch(request.get("kwargs", {}))
        for key in request.get("grad_inputs", []):
            tensor = args[key] if isinstance(key, int) else kwargs[key]
            tensor.requires_grad_(True)
        result = fn(*args, **kwargs)
        reply = {"result": self.to_data(result)}
        if request.get("grad_outputs") is not None:
            reply["grads"] = self.backward(result, request, args, kwargs)
        return reply

    def backward(self, result: Any, request: dict, args: list, kwargs: dict) -> dict:
        outputs = result if isinstance(result, (tuple, list)) else [result]
        pairs = [(o, torch.from_numpy(g.copy()))
                 for o, g in zip(outputs, request["grad_outputs"], strict=False) if g is not None]
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        grads: dict[str, Any] = {"inputs": {}, "params": {}}
        for key in request.get("grad_inputs", []):
            tensor = args[key] if isinstance(key, int) else kwargs[key]
            grads["inputs"][str(key)] = None if tensor.grad is None else self.to_data(tensor.grad)
        if request.get("params_of") is not None:
            module = self.objects[int(request["params_of"])]
            grads["params"] = {name: None if p.grad is None else self.to_data(p.grad)
                               for name, p in module.named_parameters()}
        return grads

    def handle(self, request: dict) -> Any:
        """Run one request (messages.Op); its reply's "ok" value."""
        op = request["op"]
        if op == Op.CALL:
            return self.call(request)
        if op == Op.GETATTR:
            return {"result": self.to_data(getattr(self.objects[int(request["handle"])], request["name"]))}
        if op == Op.IMPORT:
            import_module(self.package, request["module"])
            return {}
        if op == Op.RESET:  # between cases: nothing carries over, and every case starts seeded
            self.objects.clear()
            eager.manual_seed(0)
            return {}
        if op == Op.REFUSE:
            self.refuse(request["function"], request["message"])
            return {}
        raise ValueError(f"unknown op {op!r}")

    def refuse(self, function: str, message: str) -> None:
        """Replace `function` ("module.Qual.name") by a stand-in that raises Blocked(message), in its
        module or class and wherever a module of the submission holds it (`from .x import f`)."""
        module, _, qualname = function.partition(".")
        owner: Any = import_module(self.package, module)
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original, stand_in = inspect.getattr_static(owner, name), _blocked(message)
        setattr(owner, name, stand_in)
        modules = [m for key, m in sys.modules.items() if key.startswith(f"{PACKAGE}.")]
        classes = [c for m in modules for c in vars(m).values()
                   if isinstance(c, type) and c.__module__.startswith(f"{PACKAGE}.")]
        for holder in [*modules, *classes]:  # aliases: `from .x import f`, `forward = f` in a class
            for attr, value in list(vars(holder).items()):
                if value is original:
                    setattr(holder, attr, stand_in)

    def describe(self, error: BaseException) -> dict:
        """The error as the student should see it: type, message, and where in their files."""
        where, file, line, function = "", "", 0, ""
        for frame, lineno in traceback.walk_tb(error.__traceback__):
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(self.submission_dir):
                file, line = path.name, lineno
                where = f"{file}, line {line}, in {frame.f_code.co_name}"
                function = f"{path.stem}.{frame.f_code.co_qualname}"
        # As the student sees their files: by name, not as the grader's package in a scratch folder
        message = str(error).replace(f"{self.submission_dir}/", "").replace(f"'{PACKAGE}.", "'")
        if isinstance(error, SyntaxError) and error.filename:  # str() would repeat the location
            file, line, message = Path(error.filename).name, error.lineno or 0, error.msg
            where = f"{file}, line {line}"
        if isinstance(error, ModuleNotFoundError) and (error.name or "").startswith(f"{PACKAGE}."):
            file, line = f"{error.name.split('.')[1]}.py", 0  # the submission file missing (or blocked)
        type_name = type(error).__name__
        if isinstance(error, OSError) and error.errno == errno.EFBIG:  # the log's RLIMIT_FSIZE
            type_name = TOO_MUCH_OUTPUT
            message = f"your code printed more than {self.output_bytes >> 20} MiB: remove the prints"
        return {"type": type_name, "message": message[:1000], "where": where, "file": file, "line": line,
                "function": function}


class ReturnValueError(Exception):
    """What a call returned cannot be sent back (protocol.encode refused it)."""

    def __init__(self, error: Exception):
        super().__init__(f"the value returned cannot be graded: {error}")


def _kind(value: Any) -> str:
    """What an object that stays in the worker is, for the judge's messages."""
    if isinstance(value, torch.Tensor):  # sparse, quantized, on the meta device, ...
        return f"a {value.layout} tensor on {value.device}" + (" (quantized)" if value.is_quantized else "")
    return f"a {type(value).__name__}"


def _empty_log() -> None:
    """Empty the capped log (stdout and stderr), so that one flood does not fail every later call."""
    os.ftruncate(1, 0)
    os.lseek(1, 0, os.SEEK_SET)


def main(requests: io.RawIOBase, replies: io.RawIOBase, argv: list[str], limits: Limits) -> None:
    """Serve the judge: argv is SUBMISSION_DIR [BLOCKED]."""
    global _serving
    submission_dir = Path(argv[0])
    blocked = argv[1].split(",") if len(argv) > 1 and argv[1] else []
    sys.meta_path.insert(0, _Refuse(blocked))
    guards = forbid()  # noqa: F841 - kept alive: its kernels refuse while it lives
    eager.install()  # the student's optimizers
    torch.set_num_threads(1)
    eager.manual_seed(0)
    sys.dont_write_bytecode = True
    watchdog = None  # one way of stopping a request out of time per platform
    if hasattr(signal, "SIGXCPU"):
        signal.signal(signal.SIGXCPU, _on_time_limit)
    else:  # Windows: the judge gives each request its CPU seconds
        watchdog = Watchdog()
    session = Session(submission_dir, limits.file_bytes)
    send(replies, READY)
    while True:
        try:
            request = receive(requests)
        except EOFError:
            return
        try:
            _serving = True
            with watchdog.armed(request.get(CPU_SECONDS)) if watchdog else nullcontext():
                reply = ok(request, session.handle(request))
        except BaseException as error:  # noqa: BLE001 - SystemExit too: it costs one call, not the worker
            _serving = False
            reply = failed(request, session.describe(error))
            if reply["error"]["type"] == TOO_MUCH_OUTPUT:
                _empty_log()
        _serving = False
        try:
            send(replies, reply)
        except (TypeError, ValueError, ProtocolError) as error:
            send(replies, failed(request, session.describe(ReturnValueError(error))))
