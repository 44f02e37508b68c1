"""The reference solutions, for hidden tests only: imported in the judge, on first use."""
import importlib
from types import ModuleType


class Reference:
    """`ref.attention` is `solutions.attention`; unavailable while only public tests run."""

    available = True

    def __getattr__(self, module: str) -> ModuleType:
        if not self.available:
            raise RuntimeError("a public test used the reference solutions")
        return importlib.import_module(f"solutions.{module}")


ref = Reference()
