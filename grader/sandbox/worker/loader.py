"""Importing a submission: a folder of exercise files as a package of its own.

The package gets a name that cannot clash with the reference's `solutions` (the submission's
files use relative imports). The worker does this in the sandbox; the experiments do it
in-process, for code the user runs on their own machine anyway.
"""
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_package(directory: Path, name: str = "submission") -> ModuleType:
    """Import `directory` as a package called `name` (with or without an __init__.py)."""
    directory = Path(directory).resolve()
    init = directory / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(directory)])
    else:
        spec = importlib.util.spec_from_loader(name, loader=None, is_package=True)
        spec.submodule_search_locations = [str(directory)]
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    if init.is_file():
        spec.loader.exec_module(package)
    return package


def import_module(package: ModuleType, module: str) -> ModuleType:
    """`package.module`, imported (its import errors propagate to the caller)."""
    return importlib.import_module(f"{package.__name__}.{module}")
