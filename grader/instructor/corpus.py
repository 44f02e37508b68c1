"""A bug corpus: a Python file of one-bug variants of a correct submission (the project's is
examples/submissions/bugs.py; an instructor may write their own), loaded as a module."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

DEFAULT = Path(__file__).resolve().parents[2] / "examples" / "submissions" / "bugs.py"


def load_bugs(path: Path = DEFAULT) -> ModuleType:
    """The corpus module (its BUGS, BY_NAME, materialize, ...); it is not part of a package."""
    spec = importlib.util.spec_from_file_location("example_submission_bugs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
