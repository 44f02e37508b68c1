"""Finding a submission: a directory of docs/spec.md files, a zip of one, or a notebook.

A notebook is read, never run: each code cell that starts with `%%writefile NAME.py` (the
Colab/Jupyter idiom) or `# file: NAME.py` becomes that file, as running the notebook would write
it (a later cell for the same file replaces it; `%%writefile -a` appends); other cells are ignored.

The exercise files are looked for in the folder given (or unpacked), else in the one folder below
it that holds the most of them (a zip of a single folder, or of a whole repository).

Importing one is sandbox/loader.py's work.
"""
import json
import re
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from .archive import ArchiveError, safe_extract
from .spec import COMPONENTS

MODULES = COMPONENTS
"""A submission's files: one module per component, named after it."""
MAX_ZIP_BYTES = 20 * 1024 * 1024
MAX_ZIP_FILES = 2000
"""A submission's zip: its caps (a whole repository fits; a zip bomb does not); a notebook's size too."""
SEARCH_DEPTH = 5
"""How deep below the folder given the exercise files are looked for."""
CELLS_FILE = ".notebook_cells.json"
"""Written next to a notebook's files: the cells that wrote each from scratch (counting every cell from 1),
for the messages of a file that a later cell replaced."""
_CELL_FILE = re.compile(r"^(?:%%writefile(\s+(?:-a|--append))?|#\s*file:)\s+(?:\S*/)?(\w+\.py)\s*$")


class SubmissionError(ValueError):
    """A submission that cannot be read at all (missing, empty, not a directory or zip)."""


def _exercise_files(folder: Path) -> int:
    return sum((folder / f"{name}.py").is_file() for name in MODULES)


def _folders_below(folder: Path, depth: int) -> Iterator[Path]:
    """Folders below `folder`, hidden ones left out; a package's subpackages too (its own code, such
    as a grader's test suites named after the components)."""
    for child in sorted(folder.iterdir()):
        if child.is_dir() and not child.is_symlink() and not child.name.startswith((".", "__")):
            yield child
            if depth > 1 and not (child / "__init__.py").is_file():
                yield from _folders_below(child, depth - 1)


def _package_root(directory: Path, shown: Path, scratch: Path | None) -> Path:
    """The folder that holds the exercise files: `directory` itself, else the one below it that holds
    the most of them, else (given a `scratch` to unpack it in) what its one uploaded zip or notebook
    holds; SubmissionError, saying what it found, if none or several do."""
    if _exercise_files(directory):
        return directory
    below = _folders_below(directory, SEARCH_DEPTH)
    found = {folder: n for folder in below if (n := _exercise_files(folder))}
    uploads = [entry for entry in directory.iterdir() if entry.suffix.lower() in (".zip", ".ipynb")
               and entry.is_file() and not entry.is_symlink()]
    if not found and len(uploads) == 1 and scratch is not None:
        scratch.mkdir(parents=True, exist_ok=True)
        return unpack(uploads[0], Path(tempfile.mkdtemp(prefix="upload-", dir=scratch)), upload=True)
    if not found:
        raise SubmissionError(f"{shown} holds none of {', '.join(m + '.py' for m in MODULES)}")
    best = [folder for folder, n in found.items() if n == max(found.values())]
    if len(best) > 1:
        names = [f"{folder.relative_to(directory).as_posix()}/" for folder in best]
        raise SubmissionError(f"{shown}: found exercise files in {', '.join(names[:-1])} and {names[-1]}: "
                              "pass one of those folders")
    return best[0]


def special(path: Path) -> bool:
    """Whether `path` is a FIFO, a device or a socket: never opened (a FIFO blocks its reader for ever,
    a device such as /dev/zero reads for ever). Links are not followed."""
    mode = path.lstat().st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


def special_files(folder: Path) -> list[str]:
    """The FIFOs, devices and sockets in `folder` (a submission's copy leaves them out)."""
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if special(path))


def unpack(path: Path, scratch: Path, *, upload: bool = False) -> Path:
    """The directory holding the submission's .py files; a zip is extracted into `scratch`. A folder (or a
    zip) that holds no exercise file but one uploaded zip or notebook is that upload (how Gradescope keeps
    a student who uploaded one file, and how grade-all zips that folder); once: `upload` is such a file,
    whose own uploads are not looked into (a zip may hold itself)."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no such file or directory: {path}")
    if path.is_dir():
        return _package_root(path, path, None if upload else scratch)
    if not path.is_file():
        raise SubmissionError(f"{path} is not a regular file (a FIFO, a device or a socket): it is not read")
    if zipfile.is_zipfile(path):
        try:
            safe_extract(path, scratch, MAX_ZIP_BYTES, MAX_ZIP_FILES)
        except ArchiveError as error:
            raise SubmissionError(str(error)) from error
        return _package_root(scratch, path, None if upload else scratch)
    if path.suffix == ".ipynb":
        return notebook_files(path, scratch)
    if path.suffix.lower() == ".zip" or _starts_like_a_zip(path):
        raise SubmissionError(f"{path} is a broken zip file (cut short, or damaged on the way?): it cannot "
                              "be read; zip the folder again and resubmit")
    raise SubmissionError(f"{path} is neither a directory, a zip file nor a notebook (.ipynb)")


def _starts_like_a_zip(path: Path) -> bool:
    """Whether the file begins as a zip does (its first entry's signature), whatever its name says."""
    with path.open("rb") as file:
        return file.read(4) == b"PK\x03\x04"


def notebook_files(path: Path, scratch: Path) -> Path:
    """Write the notebook's file cells into `scratch`, with Jupyter's semantics: a cell replaces the
    file, a `%%writefile -a` cell appends to it."""
    import nbformat

    if path.stat().st_size > MAX_ZIP_BYTES:
        raise SubmissionError(f"{path} is larger than {MAX_ZIP_BYTES >> 20} MiB")
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several unrelated types for a bad file
        raise SubmissionError(f"{path} is not a readable notebook: {error}") from error
    files: dict[str, str] = {}
    cells: dict[str, list[int]] = {}
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        first, _, body = cell.source.partition("\n")
        match = _CELL_FILE.match(first.strip())
        if match:
            append, name = match.groups()
            files[name] = (files.get(name, "") if append else "") + body + "\n"
            if not append:
                cells.setdefault(name, []).append(number)
    if not files:
        raise SubmissionError(f"{path} has no cell starting with `%%writefile NAME.py` or `# file: NAME.py`")
    for name, source in files.items():
        (scratch / name).write_text(source)
    (scratch / CELLS_FILE).write_text(json.dumps(cells))
    return _package_root(scratch, path, None)


def replaced_cells(directory: Path, name: str) -> tuple[int, list[int]] | None:
    """For a file of a notebook that two or more `%%writefile` cells wrote from scratch: the cell
    whose file is graded (counting every cell from 1) and the earlier ones it replaced; else None."""
    try:
        written = json.loads((directory / CELLS_FILE).read_text())
    except (OSError, ValueError):
        return None
    fresh = written.get(name) if isinstance(written, dict) else None  # a folder's own file may hold anything
    if not isinstance(fresh, list) or len(fresh) < 2 or not all(type(n) is int for n in fresh):
        return None
    return fresh[-1], fresh[:-1]
