"""What the submission's code must never see, named once: the reference solutions, the hidden suites and
the deployment's salt (a file among them). The worker's new root masks the packages that hold them,
"setuid" mode checks them private to root, a sandbox's template is forked only from a process that has
loaded none of them, and the student release leaves the hidden suites out.
"""
import importlib.util
from pathlib import Path

PACKAGES = ("grader", "solutions")
"""The packages a grade depends on: the grader (with its hidden suites) and the reference."""
HIDDEN_SUITES_PATH = Path("grader", "suites", "hidden")
"""The hidden suites, in the project and where it is installed (absent from a student release)."""
SALT_PATH = HIDDEN_SUITES_PATH / "salt"
"""The deployment's salt where GRADER_SALT does not give it (grader/salt.py): in no bundle or release."""
HIDDEN_SUITES = Path(__file__).parent.parent / HIDDEN_SUITES_PATH
SALT_FILE = Path(__file__).parent.parent / SALT_PATH


def package_folder(name: str) -> Path | None:
    """Where the package `name` is installed, without importing it (None if it is not)."""
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec and spec.origin else None


def secret_roots() -> list[Path]:
    """The folders of the reference and of the hidden suites, as installed here."""
    roots = (package_folder("solutions"), HIDDEN_SUITES)
    return [root for root in roots if root is not None and root.is_dir()]


def secret_files() -> list[Path]:
    """Every file of the reference, the hidden suites and the salt, wherever they are installed."""
    return [path for root in secret_roots() for path in sorted(root.rglob("*")) if path.is_file()]
