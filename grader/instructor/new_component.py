"""`grader new-component NAME --points P [--after X]`: a new component's skeletons, graded at once.

It writes what an author would otherwise copy by hand (docs/authoring.md, "A new component"): the
reference solutions/NAME.py with its stub markers and the stub exercises/NAME.py generated from it, a
public and a hidden suite with one example test each (P split between them), a reference test, the
correct example's file and one bug of the corpus; it adds NAME to grader/spec.py's COMPONENTS after X,
a part to the handout and a section to docs/spec.md's own part; then `grader generate` writes every
copy of the points and the part numbers. The skeleton computes 2 * x: `grader grade solutions` and
`grader selftest --only NAME` pass at once, and each TODO says what to replace. Nothing that exists is
overwritten.
"""
import argparse
import keyword
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from .. import spec
from ..stubs import BEGIN, END, stub_file

REPO = Path(__file__).resolve().parents[2]
TAKEN = frozenset({"reference", "checks", "fallback", "strategies", "through", "twins", "salt"})
"""Modules of grader/suites that a component's suite module would collide with."""

REFERENCE = '''\
"""{name}.py: TODO one line on what students build here (docs/spec.md, "{name}.py")."""
import torch


def {name}(x: torch.Tensor) -> torch.Tensor:
    """TODO the contract, in the words students read in their stub. (The skeleton doubles x.)"""
    {begin}
    return 2 * x
    {end}
'''

PUBLIC = '''\
"""{name}.py, public cases: TODO what they check, without the reference (they ship to students)."""
from hypothesis import given

from ...spec import TOLERANCES, Visibility
from .. import Suite
from ..checks import expect, expect_close, expect_tensor
from ..strategies import dtypes, randn, seeds

suite = Suite("{name}", Visibility.PUBLIC)
FUNCTION = "{name}.{name}"


@suite.case({public:g})
@given(seed=seeds, dtype=dtypes)
def {name}_follows_its_definition(student, seed, dtype):
    """{name}(x) keeps x's shape and dtype and follows its definition, computed here (TODO: the formula)"""
    x = randn(seed, 2, 3, dtype=dtype)
    what = f"{{FUNCTION}}(x) with x of shape {{tuple(x.shape)}}"
    y = expect_tensor(student.call(FUNCTION, x), x.shape, what)
    expect(y.dtype == dtype, f"x is {{dtype}} but {{what}} is {{y.dtype}}: compute in the input's dtype")
    expect_close(y, 2 * x, what, **TOLERANCES[dtype]._asdict())
'''

HIDDEN = '''\
"""{name}.py, hidden cases: TODO what they compare with the reference (never shipped to students)."""
from hypothesis import given

from ...spec import TOLERANCES, Visibility
from .. import Suite
from ..checks import expect_close
from ..public.{name} import FUNCTION
from ..strategies import dtypes, randn, seeds
from .reference import ref

suite = Suite("{name}", Visibility.HIDDEN)


@suite.case({hidden:g})
@given(seed=seeds, dtype=dtypes)
def {name}_matches_reference(student, seed, dtype):
    """{name}(x) matches the reference's on random inputs"""
    x = randn(seed, 4, 5, dtype=dtype)
    expected = ref.{name}.{name}(x)
    expect_close(student.call(FUNCTION, x), expected, f"{{FUNCTION}}(x)", **TOLERANCES[dtype]._asdict())
'''

REFERENCE_TEST = '''\
"""{name}.py: TODO the identities the reference must satisfy, against plain torch."""
import torch

from solutions.{name} import {name}


def test_{name}_follows_its_definition() -> None:
    x = torch.randn(2, 3, dtype=torch.float64)
    torch.testing.assert_close({name}(x), 2 * x)
'''

BUG = '''\
    # ---------------------------------------------------------------- {name}
    Bug("{name}_skeleton", "{name}", "{name}.py",
        old="return 2 * x",
        new="return x",
        description="TODO a classic mistake, one sentence for a student (the skeleton's: x is not doubled).",
        keywords=("{name}",)),
'''
CRASHES = "    # ---------------------------------------------------------------- crashes\n"

CONTRACT_SECTION = "## Components this repository adds to the contract\n"
CONTRACT_INTRO = '''\
The SPEC text above names the course's components; these are this repository's own (the line at the top
of this file lists them all), under the same conventions.

'''
CONTRACT = '''\
### {name}.py

TODO the contract: `{name}(x: Tensor) -> Tensor`, its formula with a tag of its own, dtypes, errors.

'''
TOLERANCES_SECTION = "## Tolerances the tests use, and why\n"

PART = '''\
## Part 0 — {title} (`{name}.py`, 0 points: 0 public + 0 hidden)

TODO what to implement, in the handout's words: `{name}(x)` following its formula in docs/spec.md.

Check: `grader check --only {name}`.

'''


class NewComponentError(ValueError):
    """The component cannot be added as asked (a name taken, an unknown --after)."""


def _refuse(name: str, after: str, points: float, repo: Path) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name) or name in TAKEN:
        raise NewComponentError(f"{name!r}: a component's name is a snake_case module name, not a keyword "
                                f"nor one of {sorted(TAKEN)}")
    if name in spec.COMPONENTS:
        raise NewComponentError(f"{name} is a component already")
    if after not in spec.COMPONENTS:
        raise NewComponentError(f"--after {after}: not a component ({', '.join(spec.COMPONENTS)})")
    if points <= 0:
        raise NewComponentError("--points must be above 0")
    existing = [path for path in _files(name) if (repo / path).exists()]
    if existing:
        raise NewComponentError(f"{', '.join(existing)} exist already: nothing was written")
    for path, anchor in (("examples/submissions/bugs.py", CRASHES), ("docs/spec.md", TOLERANCES_SECTION)):
        if anchor not in (repo / path).read_text():
            raise NewComponentError(f"{path} has no line {anchor.strip()!r} to write before: nothing was "
                                    "written")


def _files(name: str) -> dict[str, str]:
    """The new files, by path in the repository, as templates."""
    return {f"solutions/{name}.py": REFERENCE, f"grader/suites/public/{name}.py": PUBLIC,
            f"grader/suites/hidden/{name}.py": HIDDEN, f"tests/reference/test_{name}.py": REFERENCE_TEST}


def _components_line(components: list[str]) -> str:
    """grader/spec.py's COMPONENTS assignment, wrapped at the project's line length."""
    text = ", ".join(f'"{c}"' for c in components)
    lines = textwrap.wrap(text, width=108 - len("COMPONENTS = ("), break_on_hyphens=False)
    return "COMPONENTS = (" + ("\n" + " " * len("COMPONENTS = (")).join(lines) + ")\n"


def _add_to_spec(text: str, name: str, after: str) -> str:
    components = list(spec.COMPONENTS)
    components.insert(components.index(after) + 1, name)
    found = re.search(r"^COMPONENTS = \(.*?\)\n", text, flags=re.M | re.S)
    return text[:found.start()] + _components_line(components) + text[found.end():]


def _add_part(text: str, name: str, after: str) -> str:
    """The handout with a part for `name` after `after`'s (its number and points: `grader generate`)."""
    heading = re.search(rf"^## Part \d+ — .*\(`{after}\.py`", text, flags=re.M)
    following = re.compile(r"^## ", re.M).search(text, heading.end())
    at = following.start() if following else len(text)
    rule = re.search(r"(?:-{3,}\n\s*)+$", text[:at])  # the rule that closes the parts stays after them
    at = rule.start() if rule else at
    return text[:at] + PART.format(name=name, title=name.replace("_", " ").capitalize()) + text[at:]


def _add_contract(text: str, name: str) -> str:
    """docs/spec.md with a section for `name` in its own part (the SPEC copy above stays the SPEC's)."""
    if CONTRACT_SECTION not in text:
        section = CONTRACT_SECTION + "\n" + CONTRACT_INTRO
        text = text.replace(TOLERANCES_SECTION, section + TOLERANCES_SECTION, 1)
    return text.replace(TOLERANCES_SECTION, CONTRACT.format(name=name) + TOLERANCES_SECTION, 1)


def _without_markers(source: str) -> str:
    return "".join(line for line in source.splitlines(keepends=True) if line.strip() not in (BEGIN, END))


def new_component(name: str, *, points: float, after: str | None = None, repo: Path = REPO) -> list[str]:
    """Write the skeletons of component `name` and add it to the list, contract and handout; returns the
    paths written or changed. `grader generate` must run next, in a fresh process (COMPONENTS changed)."""
    after = after or spec.COMPONENTS[-1]
    _refuse(name, after, points, repo)
    public = points / 2
    fields = {"name": name, "public": public, "hidden": points - public, "begin": BEGIN, "end": END}
    changed = []
    for path, template in _files(name).items():
        (repo / path).write_text(template.format(**fields))
        changed.append(path)
    reference = (repo / f"solutions/{name}.py")
    (repo / f"exercises/{name}.py").write_text(stub_file(reference))
    (repo / f"examples/submissions/correct/{name}.py").write_text(_without_markers(reference.read_text()))
    bug = BUG.format(name=name)
    edits = {"grader/spec.py": lambda text: _add_to_spec(text, name, after),
             "examples/submissions/bugs.py": lambda text: text.replace(CRASHES, bug + CRASHES, 1),
             "docs/lab.md": lambda text: _add_part(text, name, after),
             "docs/spec.md": lambda text: _add_contract(text, name)}
    for path, edit in edits.items():
        (repo / path).write_text(edit((repo / path).read_text()))
    return [*changed, f"exercises/{name}.py", f"examples/submissions/correct/{name}.py", *edits]


def run(args: argparse.Namespace) -> int:
    """`grader new-component NAME --points P [--after X]`, then `grader generate`."""
    try:
        written = new_component(args.name, points=args.points, after=args.after)
    except NewComponentError as error:
        print(f"grader new-component: {error}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(written))
    generated = subprocess.run([sys.executable, "-m", "grader.cli", "generate"], cwd=REPO)
    print(f"Next: replace each TODO (grep -rn TODO {' '.join(written[:4])} docs/lab.md docs/spec.md "
          f"examples/submissions/bugs.py), then `grader release-stubs` and "
          f"`grader selftest --only {args.name}` (docs/authoring.md, 'A new component').")
    return generated.returncode
