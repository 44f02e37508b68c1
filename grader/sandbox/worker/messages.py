"""Every message between the judge and a worker, in one place: what each request asks, the reply it must
get, and the errors that cross. Both sides import this module (the worker its own copy).

The judge's requests are {"op": Op, "id": n, ...}; a forked worker's first one is GO (no id, no reply).
The worker's first message is READY; after it, one reply a request, in order: {"id": n, "ok": value} or
{"id": n, "error": {...}} (ERROR_FIELDS). `checked` holds a reply to its request: its id, and the
shape of its value for the op. Anything else came from the student's code writing to the worker's reply
pipe, and the judge gives the worker up (FORGED): the next reply would otherwise answer the wrong request.
"""
from enum import StrEnum
from typing import Any

from .protocol import ProtocolError


class Op(StrEnum):
    """What the judge asks of a worker, and what the reply's "ok" value holds."""

    GO = "go"
    """A forked worker may import the submission (it is in its control group): no reply."""
    CALL = "call"
    """{"target", "args", "kwargs"} (with "grad_inputs", "grad_outputs", "params_of" for a backward pass):
    {"result"} (and "grads": {"inputs", "params"})."""
    GETATTR = "getattr"
    """{"handle", "name"}: {"result"}."""
    IMPORT = "import"
    """{"module"}: {}."""
    RESET = "reset"
    """Forget every object held for the judge, and seed 0: {}."""
    REFUSE = "refuse"
    """{"function", "message"}: that function of the submission raises BLOCKED from now on: {}."""


GO = {"op": Op.GO}
READY = {"ready": True}
"""A worker's first message: it has imported torch and its own code, and may take requests."""
TOO_MUCH_OUTPUT = "TooMuchOutput"
"""The error type the worker reports when the student's output filled the capped log."""
TIME_LIMIT = "TimeLimit"
"""The error type the worker reports when the student's code was stopped for time (SIGXCPU, or
CPU_SECONDS used up)."""
CPU_SECONDS = "cpu_seconds"
"""A field of any request where the judge cannot send SIGXCPU (Windows): the CPU seconds of the worker's
process it may use; past them the worker's own watchdog stops the student's code with TIME_LIMIT (the
judge still kills a worker that does not answer)."""
BLOCKED = "Blocked"
"""The error type of a call that reached a function the judge told the worker to refuse (it hung)."""
ERROR_FIELDS = {"type": str, "message": str, "where": str, "file": str, "line": int, "function": str}
"""What an error reply says: the exception's type and message, where in the student's files (the file and
line), and the function it was in ("module.Qual.name")."""
FORGED = "the submission wrote to the grader's channel"
"""Why a worker is given up whose reply does not answer its request."""
_RESULT_KEYS = {Op.CALL: {"result"}, Op.GETATTR: {"result"}, Op.IMPORT: set(), Op.RESET: set(),
                Op.REFUSE: set()}


def ok(request: dict, value: Any) -> dict:
    """The reply to `request` that carries its value."""
    return {"id": request.get("id"), "ok": value}


def failed(request: dict, error: dict) -> dict:
    """The reply to `request` that says what the student's code raised (ERROR_FIELDS)."""
    return {"id": request.get("id"), "error": error}


def checked(request: dict, reply: Any) -> dict:
    """`reply`, if it answers `request`: its id, and either an error with ERROR_FIELDS or a value of the
    shape the op returns; ProtocolError (FORGED) for anything else."""
    if not (type(reply) is dict and reply.get("id") == request["id"] and len(reply) == 2):
        raise ProtocolError(f"{FORGED}: a message that is not the reply to request {request['id']}")
    if "error" in reply:
        error = reply["error"]
        if not (type(error) is dict and error.keys() == ERROR_FIELDS.keys()
                and all(type(error[key]) is kind for key, kind in ERROR_FIELDS.items())):
            raise ProtocolError(f"{FORGED}: an error reply without its fields")
        return reply
    value = reply.get("ok")
    wanted = set(_RESULT_KEYS[request["op"]])
    if request.get("grad_outputs") is not None:
        wanted.add("grads")
    if not (type(value) is dict and value.keys() == wanted):
        raise ProtocolError(f"{FORGED}: a reply to {request['op']} holding {_keys(value)}")
    grads = value.get("grads", {"inputs": {}, "params": {}})
    if not (type(grads) is dict and grads.keys() == {"inputs", "params"}
            and all(type(part) is dict for part in grads.values())):
        raise ProtocolError(f"{FORGED}: gradients without their inputs and parameters")
    return reply


def _keys(value: Any) -> str:
    return f"keys {sorted(map(str, value))[:4]}" if type(value) is dict else type(value).__name__
