"""What no exercise may use (docs/spec.md, "Conventions"): torch's own attention and Transformer.
They are what the exercises build.

Enforced where the student's code runs, in the worker, before the submission is imported
(`forbid`): torch's attention kernels refuse at the dispatcher, whatever path reaches them
(`F.scaled_dot_product_attention`, `torch.ops.aten._scaled_dot_product_attention_math`,
`torch._C._jit_get_operation`, ...); the original classes (`nn.MultiheadAttention`,
`nn.Transformer*`, however found: `nn.Module.__subclasses__()` too) refuse to be built or run; and
every alias of a forbidden function is replaced by a stand-in that names the rule. The judge also
reads each submission file first (`static_problem`): a file that names a forbidden API, or the
means to get round the guards (`torch.ops`, `torch._C`, `torch.library`, `__subclasses__`), fails
its component with one message, never imported.
"""
import ast
import re
from collections.abc import Callable
from typing import Any

FUNCTIONS = ("torch.nn.functional.scaled_dot_product_attention",
             "torch.nn.functional.multi_head_attention_forward")
CLASSES = ("MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer")
"""Of torch.nn."""
KERNELS = re.compile(r"attention|multi_head|transformer_encoder_layer|_fused_sdp")
"""The aten operators that compute attention (names in the dispatcher)."""
_ALIASES_IN = ("torch.nn", "torch.nn.functional", "torch.nn.modules", "torch.nn.modules.activation",
               "torch.nn.modules.transformer", "torch._C._nn")
"""Where the forbidden functions can be looked up from: every alias in these modules is replaced."""
_NAMES = frozenset({*CLASSES, *(name.rpartition(".")[2] for name in FUNCTIONS[1:])})
_MEANS = frozenset({"__subclasses__", "_destroy", "_jit_get_operation", "get_objects", "get_referrers"})
"""What finds the originals, or undoes the guards."""
_PREFIXES = ("_scaled_dot_product", "_native_multi_head", "_transformer_encoder_layer", "_fused_sdp",
             "_flash_attention", "_efficient_attention", "_cudnn_attention", "_triton_")
_OF_TORCH = frozenset({"ops", "_C", "library"})


_AROUND = ("which can get round the rule of docs/spec.md that forbids torch's attention and Transformer in "
           "the exercises")


class Forbidden(RuntimeError):
    """The student's code used what docs/spec.md forbids in the exercises."""


def _message(name: str) -> str:
    return f"docs/spec.md forbids {name} in the exercises: it is what you are building"


def _refusing(name: str) -> Callable:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise Forbidden(_message(name))
    return refuse


def forbid() -> Any:
    """Guard every forbidden API in this process; returns what must stay alive (the kernels' library)."""
    import importlib
    import warnings

    import torch

    library = torch.library.Library("aten", "IMPL")
    kernels = sorted(name.removeprefix("aten::") for name in torch._C._dispatch_get_all_op_names()
                     if name.startswith("aten::") and KERNELS.search(name))
    with warnings.catch_warnings():  # "overriding a previously registered kernel": the point
        warnings.simplefilter("ignore")
        for kernel in kernels:
            for key in ("CPU", "Autograd"):  # Autograd first for tensors, CPU in no_grad/inference mode
                library.impl(kernel, _refusing(f"torch's attention kernel aten::{kernel}"), key)
    for name in CLASSES:
        cls = getattr(torch.nn, name)
        refuse = _refusing(f"torch.nn.{name}")
        cls.__init__ = cls.forward = refuse  # the class itself: subclass walking finds only this
        cls.__doc__ = _message(f"torch.nn.{name}")
    stand_ins = {}
    for path in FUNCTIONS:
        module, _, name = path.rpartition(".")
        original = getattr(importlib.import_module(module), name)
        stand_in = _refusing(path)
        stand_in.__name__ = stand_in.__qualname__ = name
        stand_ins[id(original)] = stand_in
    for module in map(importlib.import_module, _ALIASES_IN):
        for attr, value in list(vars(module).items()):
            if id(value) in stand_ins:
                setattr(module, attr, stand_ins[id(value)])
    return library


def _forbidden_name(name: str) -> bool:
    return name in _NAMES or name.startswith(_PREFIXES)


def _full_name(name: str) -> str:
    if name in CLASSES:
        return f"torch.nn.{name}"
    return next((path for path in FUNCTIONS if path.endswith(f".{name}")), f"torch's {name}")


def static_problem(source: str) -> str:
    """The first forbidden name the source uses, as "line N: uses NAME" ("" if none, or if it does not
    parse: importing it says so)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            if node.attr in _OF_TORCH and isinstance(node.value, ast.Name) and node.value.id == "torch":
                return f"line {node.lineno}: uses torch.{node.attr}, {_AROUND}"
        elif isinstance(node, ast.alias):
            names += node.name.split(".")
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.append(node.value)  # getattr(nn, "MultiheadAttention")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("torch.ops", "torch._C",
                                                                               "torch.library")):
            return f"line {node.lineno}: imports {node.module}, {_AROUND}"
        for name in names:
            if name in _MEANS:
                return f"line {getattr(node, 'lineno', 0)}: uses {name}, {_AROUND}"
            if _forbidden_name(name):
                return f"line {getattr(node, 'lineno', 0)}: uses {name}: {_message(_full_name(name))}"
    return ""
