"""torch's optimizers without importing torch._dynamo, in the judge and in the worker.

The first step of any torch optimizer imports torch._dynamo, for torch.compile's sake: it calls
torch._dynamo.graph_break() around the update and wraps it in torch._dynamo.disable. That import
costs about two thirds of torch's own, once per process that trains. Outside torch.compile both
calls do nothing, so a stand-in answers them; anything else asked of it (torch.compile, a submodule,
any other name) imports the real module, which then replaces the stand-in.
"""
import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

NAME = "torch._dynamo"


class _StandIn(types.ModuleType):
    """torch._dynamo until something needs more than its two eager-mode no-ops."""

    def graph_break(self, msg: str = "") -> None:
        """Outside torch.compile, there is no graph to break."""

    def disable(self, fn: Callable | None = None, recursive: bool = True, **options: Any) -> Callable:
        """Outside torch.compile, a function runs as it is."""
        return fn if fn is not None else (lambda function: function)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__path__":  # e.g. hypothesis reading every module's __file__
            raise AttributeError(name)
        return getattr(_real(), name)  # __path__: a submodule is imported


_STAND_IN = _StandIn(NAME)


def _real() -> types.ModuleType:
    """The real torch._dynamo, imported now in place of the stand-in."""
    if sys.modules.get(NAME) is _STAND_IN:
        del sys.modules[NAME]
    if vars(torch).get("_dynamo") is _STAND_IN:
        del torch._dynamo
    return importlib.import_module(NAME)


def install() -> None:
    """Put the stand-in in place, unless torch._dynamo is imported already."""
    if NAME not in sys.modules:
        sys.modules[NAME] = _STAND_IN
        torch._dynamo = _STAND_IN
