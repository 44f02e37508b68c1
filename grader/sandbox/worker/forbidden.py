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
_NAMES = frozenset({*CLASSES, *(path.rpartition(".")[2] for path in FUNCTIONS)})
"""Names read as torch's wherever the file does not define them itself (attention.py defines its own
scaled_dot_product_attention: that is the exercise, and other files import it relatively)."""
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


def _own_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names the file binds itself, names bound by its relative imports): neither is torch's, so a
    forbidden-looking name among them is the exercise's own (its `scaled_dot_product_attention`)."""
    own: set[str] = set()
    relative: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, ast.ImportFrom) and node.level:
            relative.update(alias.asname or alias.name for alias in node.names)
    return own | relative, relative


def _root(node: ast.expr) -> str:
    """The name an attribute chain starts from ("attention" for attention.scaled_dot_product_attention)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _names_used(node: ast.AST, own: set[str], relative: set[str]) -> list[str]:
    """The names `node` reaches that may be torch's: not the file's own, nor through its relative imports."""
    if isinstance(node, ast.Attribute):
        return [] if _root(node.value) in relative else [node.attr]
    if isinstance(node, ast.ImportFrom):
        return [] if node.level else [alias.name for alias in node.names]
    if isinstance(node, ast.Import):
        return [part for alias in node.names for part in alias.name.split(".")]
    if isinstance(node, ast.Name) and node.id not in own:
        return [node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in own:
        return [node.value]  # getattr(nn, "MultiheadAttention")
    return []


def static_problem(source: str) -> str:
    """The first forbidden name the source uses, as "line N: uses NAME" ("" if none, or if it does not
    parse: importing it says so). A name the file defines itself, or imports relatively, is its own."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    own, relative = _own_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _OF_TORCH and isinstance(node.value, ast.Name) \
                and node.value.id == "torch":
            return f"line {node.lineno}: uses torch.{node.attr}, {_AROUND}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("torch.ops", "torch._C",
                                                                               "torch.library")):
            return f"line {node.lineno}: imports {node.module}, {_AROUND}"
        for name in _names_used(node, own, relative):
            if name in _MEANS:
                return f"line {getattr(node, 'lineno', 0)}: uses {name}, {_AROUND}"
            if _forbidden_name(name):
                return f"line {getattr(node, 'lineno', 0)}: uses {name}: {_message(_full_name(name))}"
    return ""
