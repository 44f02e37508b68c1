"""torch's optimizers and backward passes without importing torch._dynamo or sympy, in the judge and
in the worker.

The first step of any torch optimizer imports torch._dynamo, for torch.compile's sake: it calls
torch._dynamo.graph_break() around the update and wraps it in torch._dynamo.disable. A backward pass
given its output gradients (`torch.autograd.backward(outputs, grads)`) imports
torch.fx.experimental.symbolic_shapes, and with it sympy, to compare the shapes with `expect_true` and
`sym_eq`. Each import costs about half of torch's own, once per process. Outside torch.compile these
functions see plain ints and bools, so stand-ins answer them as the real ones do; anything else asked
of a stand-in (torch.compile, a submodule, any other name, a symbolic size) imports the real module,
which then replaces the stand-in.

manual_seed is torch.manual_seed for the judge and the worker, which compute on the CPU alone: torch's
also queues a seeding of each accelerator not yet initialised (CUDA, XPU, MTIA), each with a formatted
stack trace: about a millisecond a call, deeper in hypothesis's frames dearer, hundreds of calls a
grade on each side (the tests seed the worker before building each student model).
"""
import functools
import importlib
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

import torch


class _StandIn(types.ModuleType):
    """A module of torch's until something needs more than the eager-mode functions defined here."""

    package = False
    """Whether the real module is a package: asking for its __path__ then means importing a submodule."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and not (name == "__path__" and self.package):  # e.g. `from x import f`,
            raise AttributeError(name)  # or hypothesis reading every module's __file__
        return getattr(_real(self.__name__), name)


class _Dynamo(_StandIn):
    package = True

    def graph_break(self, msg: str = "") -> None:
        """Outside torch.compile, there is no graph to break."""

    def disable(self, fn: Callable | None = None, recursive: bool = True, **options: Any) -> Callable:
        """Outside torch.compile, a function runs as it is."""
        return fn if fn is not None else (lambda function: function)


class _SymbolicShapes(_StandIn):
    def sym_eq(self, x: Any, y: Any) -> Any:
        """==, element by element on tuples and lists, as the real one computes it on plain ints."""
        if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
            return len(x) == len(y) and functools.reduce(operator.and_, map(self.sym_eq, x, y), True)
        if type(x) is int and type(y) is int:
            return x == y
        return _real(self.__name__).sym_eq(x, y)

    def expect_true(self, a: Any, skip: int = 0) -> bool:
        """A plain bool is what it is; anything else is the real module's to judge."""
        return a if type(a) is bool else _real(self.__name__).expect_true(a, skip + 1)


_STAND_INS = {stand_in.__name__: stand_in for stand_in in (
    _Dynamo("torch._dynamo"), _SymbolicShapes("torch.fx.experimental.symbolic_shapes"))}


def _real(name: str) -> types.ModuleType:
    """The real module, imported now in place of its stand-in."""
    parent, _, child = name.rpartition(".")
    if sys.modules.get(name) is _STAND_INS[name]:
        del sys.modules[name]
    if vars(sys.modules[parent]).get(child) is _STAND_INS[name]:
        delattr(sys.modules[parent], child)
    return importlib.import_module(name)


def manual_seed(seed: int) -> torch.Generator:
    """Seed the CPU's default generator, as torch.manual_seed does (and nothing else)."""
    return torch.default_generator.manual_seed(int(seed))


def install() -> None:
    """Put the stand-ins in place, except where the real module is imported already."""
    for name, stand_in in _STAND_INS.items():
        if name not in sys.modules:
            parent, _, child = name.rpartition(".")
            sys.modules[name] = stand_in
            setattr(importlib.import_module(parent), child, stand_in)

