"""docs/spec.md, the contract inside the repository: it defines every formula tag the code uses,
carries ../shared/SPEC.md's text, and states the tolerances that grader/spec.py defines."""
import io
import re
import tokenize

import pytest

from grader import spec
from helpers import ROOT

SPEC_DOC = ROOT / "docs" / "spec.md"
SOURCE = ROOT.parent / "shared" / "SPEC.md"
SCANNED = ("grader", "solutions", "exercises", "experiments", "examples", "docs", "README.md")

# A tag is a capital letter and a digit: "(T3)" in parentheses (any letter, so that a new family
# is caught too), or bare "T1" / "P1-P3" for the contract's letters. Only string literals,
# comments and Markdown are read, so a Python name such as F1 (a constant) is not a use, and
# neither are "L2 norm", "quiz Q1", "0xB1" or "d1".
PARENTHESISED = re.compile(r"\(([A-Z][1-9]\d?)\)")
BARE = re.compile(r"\b([ABFMPTX][1-9])\b")
_TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def prose(source: str, markdown: bool = False) -> list[str]:
    """What a file says to people: all of a Markdown file, a Python file's strings and comments."""
    if markdown:
        return [source]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.string for token in tokens if token.type in _TEXT_TOKENS]


def tags_in(source: str, markdown: bool = False) -> set[str]:
    return {match.group(1) for text in prose(source, markdown)
            for pattern in (PARENTHESISED, BARE) for match in pattern.finditer(text)}


def used_tags() -> dict[str, set[str]]:
    """Every tag used in the scanned folders, with the files that use it."""
    used: dict[str, set[str]] = {}
    for name in SCANNED:
        paths = [ROOT / name] if (ROOT / name).is_file() else sorted((ROOT / name).rglob("*"))
        for path in paths:
            if path.suffix in (".py", ".md") and path.is_file() and path != SPEC_DOC:
                for tag in tags_in(path.read_text(), markdown=path.suffix == ".md"):
                    used.setdefault(tag, set()).add(str(path.relative_to(ROOT)))
    return used


def defined_tags(text: str) -> set[str]:
    return set(PARENTHESISED.findall(text))


def test_every_formula_tag_in_use_is_defined_in_docs_spec():
    used = used_tags()
    assert len(used) >= 16, f"the scan found only {sorted(used)}: is the pattern still right?"
    defined = defined_tags(SPEC_DOC.read_text())
    undefined = {tag: sorted(files) for tag, files in used.items() if tag not in defined}
    assert not undefined, f"formula tags used but not defined as (TAG) in docs/spec.md: {undefined}"


def test_the_scan_finds_tags_in_strings_and_comments_only():
    source = ('F1 = "(F1) fc2(...)"\n'
              'hint = f"check {F1}: see P1-P3 and (Z9)"  # T2\n'
              'x = B1 + 0xB1 + d1  # the L2 norm, quiz Q1\n')
    assert tags_in(source) == {"F1", "P1", "P3", "Z9", "T2"}
    assert tags_in("(A1) and T3, not (d1) or L2", markdown=True) == {"A1", "T3"}
    assert "Z9" not in defined_tags(SPEC_DOC.read_text())  # so a use of (Z9) would fail the test above


@pytest.mark.skipif(not SOURCE.is_file(), reason="no ../shared/SPEC.md next to this clone")
def test_docs_spec_carries_the_source_of_truth_unchanged():
    title, body = SOURCE.read_text().split("\n", 1)
    text = SPEC_DOC.read_text()
    assert text.startswith(title + "\n")
    assert body.rstrip("\n") in text, "docs/spec.md differs from ../shared/SPEC.md: copy the new text in"
    assert defined_tags(SOURCE.read_text()) <= defined_tags(text)


def _written(value: float) -> str:
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"  # 1e-05 -> 1e-5, as the doc writes it


@pytest.mark.parametrize("name,tolerance", [
    *((f"`TOLERANCES[torch.{dtype}]`", tolerance) for dtype, tolerance in spec.TOLERANCES.items()),
    ("`GRADIENT_TOLERANCE`", spec.GRADIENT_TOLERANCE),
    ("`FLOAT32_TABLE_TOLERANCE`", spec.FLOAT32_TABLE_TOLERANCE),
    ("`EXACT`", spec.EXACT),
])
def test_the_tolerance_table_matches_grader_spec(name, tolerance):
    rows = [line for line in SPEC_DOC.read_text().splitlines() if line.startswith(f"| {name} |")]
    assert rows, f"docs/spec.md's tolerance table has no row for {name}"
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert cells[1:3] == [_written(tolerance.atol), _written(tolerance.rtol)], (
        f"{name} is atol={tolerance.atol}, rtol={tolerance.rtol} in grader/spec.py, "
        f"but {cells[1:3]} in docs/spec.md")
