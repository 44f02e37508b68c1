"""What importing and running the grader leaves behind: no global hypothesis profile, and the
commands that grade import neither the experiments nor matplotlib; scoring and reporting need
neither the judge nor torch. Each probe runs in a fresh interpreter, so that nothing imported by
other tests hides an import."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.cli import main
from helpers import ROOT


def probe(code: str, tmp_path: Path) -> dict:
    """Run `code` in a fresh interpreter; it leaves its findings in the dict `found`."""
    out = tmp_path / "found.json"
    script = "\n".join(["import json", "found = {}", textwrap.dedent(code),
                         f"open({str(out)!r}, 'w').write(json.dumps(found))"])
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def _loaded(prefixes: tuple[str, ...]) -> str:
    """An expression: the names in sys.modules of these packages and their submodules."""
    dotted = tuple(p + "." for p in prefixes)
    return f"sorted(m for m in sys.modules if m in {prefixes!r} or m.startswith({dotted!r}))"


@pytest.mark.sandbox
def test_importing_every_suite_leaves_the_hypothesis_profile_alone(tmp_path):
    found = probe(f"""
        import sys
        from hypothesis import settings
        before = settings.default
        from grader.suites import all_cases
        found["cases"] = len(all_cases())
        found["suites"] = {_loaded(("grader.suites.public", "grader.suites.hidden"))}
        found["unchanged"] = settings.default is before
        """, tmp_path)
    assert found["cases"] > 0 and found["suites"]
    assert found["unchanged"], "importing grader.suites changed hypothesis's default settings"


@pytest.mark.sandbox
def test_grading_commands_import_neither_the_experiments_nor_matplotlib(tmp_path):
    """check and grade (on one component: the judge's imports do not depend on it) and list-tests
    (every suite), in-process."""
    found = probe(f"""
        import sys
        from grader.cli import main
        solutions = {str(ROOT / "solutions")!r}
        found["codes"] = [main(["check", solutions, "--only", "quiz"]),
                          main(["grade", solutions, "--only", "quiz"]),
                          main(["list-tests"])]
        found["loaded"] = {_loaded(("experiments", "matplotlib"))}
        """, tmp_path)
    assert found["codes"] == [0, 0, 0]
    assert found["loaded"] == []


@pytest.mark.sandbox
def test_scoring_and_reports_need_neither_the_judge_nor_torch(tmp_path):
    found = probe(f"""
        import sys
        import grader.report, grader.scoring
        found["loaded"] = {_loaded(("grader.judge", "grader.sandbox", "torch"))}
        """, tmp_path)
    assert found["loaded"] == []


def test_grader_experiments_is_still_a_command(capsys):
    with pytest.raises(SystemExit) as done:
        main(["experiments", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: grader experiments") and "--impl" in out and "--quick" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "experiments" in capsys.readouterr().out



@pytest.mark.sandbox
@pytest.mark.parametrize("command", ["check", "grade"])
def test_a_grading_command_runs_its_exit_handlers_and_its_output_arrives(tmp_path, command):
    """`grader check` and `grader grade` leave no control group of their judge's behind (their exit
    handlers remove them, where it could make them), and everything they print or write arrives."""
    from grader.sandbox import cgroup

    card = tmp_path / "card.json"
    process = subprocess.Popen([sys.executable, "-m", "grader.cli", command, str(ROOT / "solutions"),
                                "--only", "quiz", "--json", str(card)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    last = out.splitlines()[-1]
    assert last.startswith("isolation: ") if command == "check" else "total" in last, out
    written = json.loads(card.read_text())
    assert written["score"] == written["max_score"] > 0
    assert not [folder for _, folder in cgroup._judge_folders(process.pid) if folder.exists()]
