"""The authors' commands (docs/authoring.md): `grader generate`, `grader new-component`, `grader selftest`.
Registered by commands.add_commands; each module they run is imported only when it runs."""
import argparse

from ..grading import parse_components


def _generate(args: argparse.Namespace) -> int:
    from .generate import run
    return run(args)


def _new_component(args: argparse.Namespace) -> int:
    from .new_component import run
    return run(args)


def _selftest(args: argparse.Namespace) -> int:
    from .selftest import run
    return run(args)


def add_authoring_commands(commands: argparse._SubParsersAction) -> None:
    """Add generate, new-component and selftest to the `grader` command line."""
    generate = commands.add_parser("generate", help="rewrite every generated copy of the components and "
                                   "their points (handout, docs, grader/points.py)")
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 if a copy is stale")
    generate.set_defaults(run=_generate)

    new = commands.add_parser("new-component", help="add a component: reference, stub, suites, reference "
                              "test, example and bug, contract and handout places (docs/authoring.md)")
    new.add_argument("name", metavar="NAME", help="the component and its file NAME.py (snake_case)")
    new.add_argument("--points", type=float, required=True, metavar="P",
                     help="its points, split between one public and one hidden example test")
    new.add_argument("--after", metavar="X", help="the component it follows (default: the last)")
    new.set_defaults(run=_new_component)

    selftest = commands.add_parser("selftest", help="an author's inner loop: grade the reference, the "
                                   "correct example and the component's example bugs, and check each bug is "
                                   "caught")
    selftest.add_argument("--only", metavar="A,B", type=parse_components, required=True,
                          help="the components to test (comma-separated)")
    selftest.set_defaults(run=_selftest)
