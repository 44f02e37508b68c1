"""Generate the student stubs (exercises/) from the reference solutions (solutions/).

In a solution file, every block between `# BEGIN SOLUTION` and `# END SOLUTION` is what the
student writes. In the stub it becomes `raise NotImplementedError("<where>: ...")` at the
block's indentation, unless a `# BEGIN STUB` ... `# END STUB` block of commented-out lines
follows it directly: then those lines, uncommented, stand in its place (used where a raise
cannot, e.g. a module-level constant). Everything else (imports, signatures, docstrings,
`super().__init__()`) is kept as it is.
"""
import re
from pathlib import Path

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
STUB_BEGIN, STUB_END = "# BEGIN STUB", "# END STUB"
HEADER = ("# Generated from solutions/{name} by `grader release-stubs`: "
          "fill in the NotImplementedError parts.\n")
_DEF = re.compile(r"^(\s*)(?:def|class)\s+(\w+)")


class StubError(ValueError):
    """A solution file whose markers do not pair up."""


def _enclosing_name(lines: list[str], index: int, indent: int) -> str:
    """The qualified name of the def/class that encloses line `index` (module if none)."""
    names = []
    for line in reversed(lines[:index]):
        match = _DEF.match(line)
        if match and len(match.group(1)) < indent:
            names.append(match.group(2))
            indent = len(match.group(1))
    return ".".join(reversed(names)) or "module"


def stub_source(source: str, filename: str = "<solution>") -> str:
    """The stub version of one solution file's source."""
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped in (END, STUB_BEGIN, STUB_END):
            raise StubError(f"{filename}:{i + 1}: {stripped!r} without a {BEGIN!r} before it")
        if stripped != BEGIN:
            out.append(lines[i])
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == END), None)
        if end is None:
            raise StubError(f"{filename}:{i + 1}: {BEGIN!r} without a matching {END!r}")
        if any(lines[j].strip() == BEGIN for j in range(i + 1, end)):
            raise StubError(f"{filename}:{i + 1}: nested {BEGIN!r}")
        i = end + 1
        if i < len(lines) and lines[i].strip() == STUB_BEGIN:
            stub_end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == STUB_END), None)
            if stub_end is None:
                raise StubError(f"{filename}:{i + 1}: {STUB_BEGIN!r} without a matching {STUB_END!r}")
            out.extend(re.sub(r"^(\s*)# ?", r"\1", line, count=1) for line in lines[i + 1:stub_end])
            i = stub_end + 1
        else:
            where = _enclosing_name(lines, i - 1, indent)
            message = f"{where}: your code here (see the docstring)"
            out.append(" " * indent + f'raise NotImplementedError("{message}")\n')
    return "".join(out)


def release_stubs(solutions: Path, exercises: Path) -> list[Path]:
    """Write the stub of every solutions/*.py into exercises/; returns the files written."""
    exercises.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(solutions.glob("*.py")):
        target = exercises / path.name
        target.write_text(HEADER.format(name=path.name) + stub_source(path.read_text(), str(path)))
        written.append(target)
    return written


def stale_stubs(solutions: Path, exercises: Path) -> list[str]:
    """Names of exercise files that are missing or differ from what release_stubs would write."""
    return [
        path.name
        for path in sorted(solutions.glob("*.py"))
        if not (exercises / path.name).is_file()
        or (exercises / path.name).read_text()
        != HEADER.format(name=path.name) + stub_source(path.read_text())
    ]
