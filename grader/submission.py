"""Finding and importing a submission: a directory of docs/spec.md files, a zip of one, or a notebook.

A notebook is read, never run: each code cell that starts with `%%writefile NAME.py` (the
Colab/Jupyter idiom) or `# file: NAME.py` becomes that file; other cells are ignored.

A submission is imported as a package of its own (its files use relative imports), under a
name that cannot clash with the reference's `solutions`. The worker does this in the sandbox;
the experiments do it in-process for code the user runs on their own machine anyway.
"""
import importlib
import importlib.util
import re
import sys
import zipfile
from pathlib import Path
from types import ModuleType

from .spec import COMPONENTS

MODULES = COMPONENTS
"""A submission's files: one module per component, named after it."""
MAX_ZIP_BYTES = 20 * 1024 * 1024
_CELL_FILE = re.compile(r"^(?:%%writefile(?:\s+-a)?|#\s*file:)\s+(?:\S*/)?(\w+\.py)\s*$")


class SubmissionError(ValueError):
    """A submission that cannot be read at all (missing, empty, not a directory or zip)."""


def _package_root(directory: Path) -> Path:
    """The folder that holds the exercise files: the directory itself or its single subfolder."""
    if any((directory / f"{name}.py").is_file() for name in MODULES):
        return directory
    subfolders = [p for p in directory.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))]
    if len(subfolders) == 1:
        return _package_root(subfolders[0])
    raise SubmissionError(f"{directory} holds none of {', '.join(m + '.py' for m in MODULES)}")


def unpack(path: Path, scratch: Path) -> Path:
    """The directory holding the submission's .py files; a zip is extracted into `scratch`."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no such file or directory: {path}")
    if path.is_dir():
        return _package_root(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if not m.is_dir()]
            if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
                raise SubmissionError(f"{path} unpacks to more than {MAX_ZIP_BYTES >> 20} MiB")
            for member in members:
                target = (scratch / member.filename).resolve()
                if not target.is_relative_to(scratch.resolve()):
                    raise SubmissionError(f"{path} has an entry outside its folder: {member.filename}")
            archive.extractall(scratch)
        return _package_root(scratch)
    if path.suffix == ".ipynb":
        return notebook_files(path, scratch)
    raise SubmissionError(f"{path} is neither a directory, a zip file nor a notebook (.ipynb)")


def notebook_files(path: Path, scratch: Path) -> Path:
    """Write the notebook's file cells into `scratch` (later cells for one file append)."""
    import nbformat

    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several unrelated types for a bad file
        raise SubmissionError(f"{path} is not a readable notebook: {error}") from error
    files: dict[str, str] = {}
    for cell in notebook.cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        first, _, body = cell.source.partition("\n")
        match = _CELL_FILE.match(first.strip())
        if match:
            files[match.group(1)] = files.get(match.group(1), "") + body + "\n"
    if not files:
        raise SubmissionError(f"{path} has no cell starting with `%%writefile NAME.py` or `# file: NAME.py`")
    for name, source in files.items():
        (scratch / name).write_text(source)
    return _package_root(scratch)


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
