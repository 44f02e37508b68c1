"""Generate the student stubs (exercises/) from the reference solutions (solutions/).

In a solution file, every block between `# BEGIN SOLUTION` and `# END SOLUTION` is what the
student writes. In the stub it becomes `raise NotImplementedError("<where>: ...")` at the
block's indentation, unless a `# BEGIN STUB` ... `# END STUB` block of commented-out lines
follows it directly: then those lines, uncommented, stand in its place (used where a raise
cannot, e.g. a module-level constant). Everything else (imports, signatures, docstrings,
`super().__init__()`) is kept as it is.

A stub's first line records a digest of the rest of the file as generated: release_stubs
regenerates a stub whose text still matches it, and never overwrites one that was edited.
"""
import hashlib
import re
from pathlib import Path

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
STUB_BEGIN, STUB_END = "# BEGIN STUB", "# END STUB"
HEADER = "# Generated from solutions/{name} by `grader release-stubs` (stub {digest}): fill in the\n"
NOTICE = "# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.\n"
_DIGEST = re.compile(r"# Generated from solutions/\S+ by `grader release-stubs` \(stub ([0-9a-f]{12})\)")
_DEF = re.compile(r"^(\s*)(?:def|class)\s+(\w+)")
_STUB_MESSAGE = "{where}: your code here (see the docstring)"
_STUB_RAISED = re.compile(r"^([\w.]+): your code here")


class StubError(ValueError):
    """A solution file whose markers do not pair up."""


class EditedStubs(RuntimeError):
    """Stubs that were edited since they were generated: overwriting them would destroy work."""


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
            message = _STUB_MESSAGE.format(where=where)
            out.append(" " * indent + f'raise NotImplementedError("{message}")\n')
    return "".join(out)


def stub_name(message: str) -> str | None:
    """The function a stub's NotImplementedError message names ("MultiHeadAttention.forward"), if any."""
    found = _STUB_RAISED.match(message)
    return found.group(1) if found else None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def stub_file(solution: Path) -> str:
    """The text of the exercise file for one solution file: header, notice and stub."""
    rest = NOTICE + stub_source(solution.read_text(), str(solution))
    return HEADER.format(name=solution.name, digest=_digest(rest)) + rest


def is_edited(text: str) -> bool:
    """Whether an exercise file differs from what release_stubs wrote (or it wrote none of it)."""
    first, _, rest = text.partition("\n")
    found = _DIGEST.match(first)
    return not found or found.group(1) != _digest(rest)


def release_stubs(solutions: Path, exercises: Path, force: bool = False) -> list[Path]:
    """Write the stub of every solutions/*.py into exercises/; returns the files written.

    A stub that is missing, or as generated (even from older solutions), is written; if any
    exercise file was edited, nothing is written (EditedStubs) unless `force`.
    """
    stubs = {exercises / path.name: stub_file(path) for path in sorted(solutions.glob("*.py"))}
    edited = [str(target) for target in stubs if target.is_file() and is_edited(target.read_text())]
    if edited and not force:
        it = "them" if len(edited) > 1 else "it"
        raise EditedStubs(f"{', '.join(edited)}: edited after `grader release-stubs` wrote {it}, so nothing "
                          "was written (no work is lost); --force overwrites")
    exercises.mkdir(parents=True, exist_ok=True)
    for target, text in stubs.items():
        target.write_text(text)
    return list(stubs)


def stale_stubs(solutions: Path, exercises: Path) -> list[str]:
    """Names of exercise files that are missing or differ from what release_stubs would write."""
    return [
        path.name
        for path in sorted(solutions.glob("*.py"))
        if not (exercises / path.name).is_file() or (exercises / path.name).read_text() != stub_file(path)
    ]
