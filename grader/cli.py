"""The `grader` command line."""
import argparse
import sys
from pathlib import Path

from .stubs import release_stubs


def _release_stubs(args: argparse.Namespace) -> int:
    for path in release_stubs(Path(args.solutions), Path(args.out)):
        print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    stubs = commands.add_parser("release-stubs", help="regenerate exercises/ from solutions/")
    stubs.add_argument("--solutions", default="solutions", help="reference solutions (default: solutions/)")
    stubs.add_argument("--out", default="exercises", help="where the stubs go (default: exercises/)")
    stubs.set_defaults(run=_release_stubs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
