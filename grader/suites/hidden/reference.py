"""The reference solutions, for hidden tests only: `ref.attention` is `solutions.attention`,
imported in the judge on first use (grader.suites.hidden checks that they are installed)."""
import importlib
from types import ModuleType


class Reference:
    def __getattr__(self, module: str) -> ModuleType:
        return importlib.import_module(f"solutions.{module}")


ref = Reference()
