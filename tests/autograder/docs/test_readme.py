"""README.md is true to the code: it names every subcommand of `grader --help` and every module of
the grader in its layout."""
import re
from importlib.metadata import entry_points

from grader.cli import PLUGIN_GROUP, build_parser, command_names
from helpers import ROOT

README = (ROOT / "README.md").read_text()


def test_every_subcommand_is_in_the_readme():
    plugins = {point.name: point for point in entry_points(group=PLUGIN_GROUP)}
    for name in command_names(build_parser(plugins, student_release=False)):
        assert re.search(rf"`?grader {re.escape(name)}\b", README), f"README does not show `grader {name}`"


def test_the_layout_names_every_module_of_the_grader():
    layout = README[README.index("## Layout"):]
    for path in sorted((ROOT / "grader").rglob("*.py")):
        if path.name != "__init__.py" and "suites" not in path.parts:
            named = re.search(rf"\b{path.stem}\b", layout)
            assert named, f"README's layout does not name {path.relative_to(ROOT)}"
