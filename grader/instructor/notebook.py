"""The lab notebook (lab.ipynb), built with nbformat from the exercise stubs and the handout.

An intro cell (the handout up to Part 1), a setup cell, then per part: the handout's section, one
`%%writefile NAME.py` cell holding the stub, and the cell that runs the public check on that part.
A part's check sits after the last part its tests also run (spec.DEPENDS): run top to bottom, every
file a check needs has been written by then (attention.py imports positional.py, for one). The rest
of the handout closes the notebook. Filled in, the notebook is itself a submission: the grader reads
its `%%writefile` cells (grader/submission.py). `grader release` writes it; instructors can also run
`python -m grader.instructor.notebook OUT`.
"""
import argparse
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from ..spec import COMPONENTS, DEPENDS

_PART = re.compile(r"^## (Part \d+\b.*?)\s*\(`(\w+)\.py`", re.MULTILINE)
_HEADING = re.compile(r"^## ", re.MULTILINE)
_RULE = re.compile(r"(?:\n-{3,})+\s*$")

GUIDE = """\
## Working in this notebook

Each part below has one cell per file that starts with `%%writefile NAME.py`. Fill in what raises
`NotImplementedError`, run the cell (it writes `NAME.py` next to this notebook), then run the part's
check cell: it runs `grader check` on this notebook's folder, the public tests of that part only.
To try your code on a small input, call it in a cell of your own: `attention = mine("attention")`
(defined by the setup cell) imports your `attention.py` as its cell last wrote it.
The grader must be installed in this kernel's environment: the setup cell installs it from the
lab's zip (`lab.zip`, next to this notebook) where it is not, e.g. on Colab.

The filled-in notebook is itself a submission: the grader reads every cell that starts with
`%%writefile NAME.py` (a later cell for the same file replaces it, `%%writefile -a` appends) and
ignores all other cells."""

SETUP = """\
# Run this cell first: the check cells call the grader with this kernel's Python. Where the lab is not
# installed (Colab), it installs it from lab.zip next to this notebook, keeping the torch already there.
import importlib
import importlib.util
import os
import subprocess
import sys
import types

if importlib.util.find_spec("grader") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "lab.zip"], check=True)


def mine(name):
    \"\"\"Your NAME.py as its cell last wrote it, imported afresh, to try on a small input:
    attention = mine("attention"). The files import one another as a package (from .positional import
    ...), so a plain `import attention` cannot load them; run a file's cell again, then call mine again.\"\"\"
    for loaded in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        del sys.modules[loaded]
    package = types.ModuleType("my_lab")
    package.__path__ = [os.getcwd()]
    sys.modules["my_lab"] = package
    return importlib.import_module(f"my_lab.{name}")"""

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def _trim(markdown: str) -> str:
    """Without surrounding blank lines and the horizontal rules that separate the handout's sections."""
    return _RULE.sub("", markdown.strip()).strip()


def handout_sections(text: str) -> tuple[str, dict[str, tuple[str, str]], str]:
    """(intro, {component: (title, section)}, closing) of the handout.

    A part is a `## Part N — Title (`NAME.py`, ...)` heading, one per component; it runs to the
    next part's heading, the last one to the next `## ` heading. The intro is what comes before
    Part 1, the closing what follows the last part.
    """
    parts = list(_PART.finditer(text))
    found = [m.group(2) for m in parts]
    if sorted(found) != sorted(COMPONENTS):
        missing = [c for c in COMPONENTS if c not in found]
        raise ValueError(f"the handout needs one `## Part N — Title (`NAME.py`, ...)` heading per component; "
                         f"it has parts for {found}, none for {missing}")
    after_last = _HEADING.search(text, parts[-1].end())
    end = after_last.start() if after_last else len(text)
    bounds = [m.start() for m in parts] + [end]
    sections = {m.group(2): (m.group(1), _trim(text[start:stop]))
                for m, start, stop in zip(parts, bounds[:-1], bounds[1:], strict=True)}
    return _trim(text[:bounds[0]]), sections, _trim(text[end:])


def check_cell(component: str) -> str:
    """The source of the cell that runs the public check on one part."""
    part = COMPONENTS.index(component) + 1
    return (f"# Public tests of Part {part} ({component}): its scorecard, and what to look at for each "
            f"failing test.\n!\"{{sys.executable}}\" -m grader.cli check . --only {component}")


def _checked_after(component: str) -> str:
    """The part after which `component`'s check runs: the last of itself and what its tests run."""
    return max((component, *DEPENDS.get(component, ())), key=COMPONENTS.index)


def write_notebook(exercises: Path, handout: Path, out: Path) -> Path:
    """Write lab.ipynb to `out` (a file, or an existing folder to write lab.ipynb into); return its path."""
    intro, parts, closing = handout_sections(Path(handout).read_text())
    cells = [new_markdown_cell(f"{intro}\n\n{GUIDE}"), new_code_cell(SETUP)]
    for component in COMPONENTS:
        title, section = parts[component]
        stub = (Path(exercises) / f"{component}.py").read_text().rstrip()
        cells += [new_markdown_cell(section), new_code_cell(f"%%writefile {component}.py\n{stub}")]
        later = _checked_after(component)
        if later != component:
            cells.append(new_markdown_cell(
                f"The check of {title} comes after {parts[later][0]}: its tests also run your `{later}.py`, "
                f"which that part's cell writes (run that cell with its stub to check this part sooner)."))
        # This part's own check first, then those that were waiting for its file.
        for checked in sorted((c for c in COMPONENTS if _checked_after(c) == component),
                              key=lambda c: c != component):
            cells.append(new_code_cell(check_cell(checked)))
    if closing:
        cells.append(new_markdown_cell(closing))
    notebook = new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC,
                                                   "language_info": {"name": "python"}})
    out = Path(out)
    if out.is_dir():
        out = out / "lab.ipynb"
    nbformat.write(notebook, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.instructor.notebook",
                                     description="write the lab notebook")
    parser.add_argument("out", help="the notebook to write (e.g. lab.ipynb), or a folder for lab.ipynb")
    parser.add_argument("--exercises", default="exercises", help="the stubs (default: exercises/)")
    parser.add_argument("--handout", default="docs/lab.md", help="the handout (default: docs/lab.md)")
    args = parser.parse_args(argv)
    print(f"wrote {write_notebook(Path(args.exercises), Path(args.handout), Path(args.out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
