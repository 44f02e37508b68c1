"""The docs cite only tests that exist: every `test_...` name in README.md and docs/*.md is a test
function (or a test file) of tests/, and every path of tests/ they name is there, so that a renamed,
moved or removed test cannot leave the docs vouching for something no test checks."""
import re

from helpers import ROOT

HISTORY = ROOT / "docs" / "performance-history.md"
"""A dated log of what was: it may name tests that have gone with the code they checked."""
DOCS = [ROOT / "README.md", *sorted(path for path in (ROOT / "docs").glob("*.md") if path != HISTORY)]
CITED = re.compile(r"\btest_[a-z0-9_]+\b")
PATHS = re.compile(r"\btests/[\w/]+\.py\b")


def _tests() -> set[str]:
    """The names of test files (without .py) and of test functions in tests/."""
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.add(path.stem)
        names |= set(re.findall(r"^\s*def (test_[a-z0-9_]+)\(", path.read_text(), re.M))
    return names


def test_every_test_the_docs_cite_exists():
    known = _tests()
    missing = {f"{doc.relative_to(ROOT)}: {name}" for doc in DOCS for name in CITED.findall(doc.read_text())
               if name not in known}
    assert not missing, "the docs cite tests that do not exist:\n" + "\n".join(sorted(missing))


def test_every_path_of_tests_the_docs_name_exists():
    missing = {f"{doc.relative_to(ROOT)}: {path}" for doc in DOCS for path in PATHS.findall(doc.read_text())
               if not (ROOT / path).is_file()}
    assert not missing, "the docs name test files that do not exist:\n" + "\n".join(sorted(missing))
