"""The grader's modules import one another without a circle: each room can be read, and changed, from
what it imports."""
import ast
import graphlib
from pathlib import Path

from helpers import ROOT


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The grader's modules that `path` imports (at its top or inside a function alike)."""
    package = (_module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]).split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            target = ".".join(part for part in (base, node.module) if part)
            found |= {f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                      for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name in modules and name != _module(path)}


def test_no_module_of_the_grader_is_in_an_import_circle():
    paths = sorted((ROOT / "grader").rglob("*.py"))
    modules = {_module(path) for path in paths}
    graph = {_module(path): _imports(path, modules) - {_module(path).rpartition(".")[0]} for path in paths}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        raise AssertionError(f"an import circle: {' -> '.join(error.args[1])}") from None
