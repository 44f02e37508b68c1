"""`grader autograder`: the Gradescope bundle, unzipped into a stand-in for /autograder and run as
Gradescope runs it (`run_autograder`, the root in AUTOGRADER_ROOT) on the reference, a buggy and a
hostile submission; every results.json must validate against the schema written from Gradescope's
specification (grader/schemas/gradescope_results.schema.json).

run_autograder runs the grader installed here (this interpreter's bin/ first on PATH): setup.sh,
which installs it on Gradescope, is checked for its syntax and for what it installs.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from itertools import cycle
from pathlib import Path

import jsonschema
import pytest

from grader.cli import main as grader_main
from grader.instructor.autograder import constraints
from grader.instructor.corpus import load_bugs
from grader.instructor.gradescope import (
    VISIBILITIES,
    _stopped,
    listed,
    minimum_timeout,
    not_graded,
    results,
    write_results,
)
from grader.results import Result
from grader.salt import deployment_salt
from grader.sandbox.modes import mode
from grader.scoring import scorecard
from grader.spec import COMPONENT_POINTS, COMPONENTS, Status
from grader.suites import Case, all_cases
from helpers import ROOT, autograder_root

SCHEMA = json.loads((ROOT / "grader" / "schemas" / "gradescope_results.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert grader_main(["autograder", "--out", str(out)]) == 0
    return out


def run_autograder(root: Path, *args: str) -> dict:
    """Run root's run_autograder as Gradescope does (in root) and return its valid results.json."""
    env = {**os.environ, "AUTOGRADER_ROOT": str(root),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(root / "run_autograder"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    payload = json.loads((root / "results" / "results.json").read_text())
    VALIDATOR.validate(payload)
    return payload


def _expected_visibility(hidden: str = "after_published") -> dict[str, str]:
    return {f"{case.component}: {case.name}" + ("" if case.public else " (hidden)"):
            "visible" if case.public else hidden for case in all_cases()}


# The bundle


def test_the_zip_holds_gradescopes_scripts_at_its_top_and_the_deployments_salt(bundle: Path):
    with zipfile.ZipFile(bundle) as archive:
        entries = {info.filename: info for info in archive.infolist()}
        text = {name: archive.read(name).decode() for name in ("setup.sh", "run_autograder", "salt",
                                                                "autograder.json", "constraints.txt")}
    assert {name for name in entries if "/" not in name} == {
        "setup.sh", "run_autograder", "autograder.json", "salt", "constraints.txt", "pyproject.toml",
        "README.md"}
    for script in ("setup.sh", "run_autograder"):
        assert entries[script].external_attr >> 16 & 0o111, f"{script} is not executable"
        syntax = subprocess.run(["bash", "-n"], input=text[script], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
    assert text["constraints.txt"] == constraints()  # what setup.sh installs exactly (test_setup_sh.py)
    assert 'torch --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"' in text["setup.sh"]
    assert "pip " not in text["run_autograder"]  # nothing is installed or downloaded at grading time
    assert text["salt"].strip() == deployment_salt()
    settings = json.loads(text["autograder.json"])
    assert settings.pop("cases") and settings == {"hidden_visibility": "after_published",
                                                  "timeout_scale": 1.0, "timeout": 600.0,
                                                  "unsafe_no_sandbox": False}
    assert {f"solutions/{path.name}" for path in (ROOT / "solutions").glob("*.py")} <= set(entries)
    assert {f"grader/suites/hidden/{name}.py" for name in COMPONENTS} <= set(entries)
    left_out = ("exercises/", "examples/", "tests/", "experiments/", "grader/suites/hidden/salt")
    assert not [name for name in entries if name.startswith(left_out) or "__pycache__" in name]


def test_the_bundle_lists_the_cases_so_that_run_autograder_imports_no_torch(bundle: Path, tmp_path: Path):
    """results.json needs each case's name, visibility and doc: autograder.json lists them, and the step
    that writes results.json imports neither the suites nor torch (the judge, its child, does)."""
    settings = tmp_path / "autograder.json"
    with zipfile.ZipFile(bundle) as archive:
        settings.write_bytes(archive.read("autograder.json"))
    fields = ("component", "name", "points", "visibility", "doc", "public")
    assert [tuple(getattr(case, f) for f in fields) for case in listed(json.loads(settings.read_text()))] == \
        [tuple(getattr(case, f) for f in fields) for case in all_cases()]
    code = ("import json, sys; import grader.instructor.gradescope as g; "
            f"g.results({{'score': 0, 'tests': []}}, g.listed(json.load(open({str(settings)!r})))); "
            "print(sorted({'torch', 'hypothesis', 'grader.suites'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_an_existing_file_is_replaced_only_with_force(tmp_path: Path, capsys: pytest.CaptureFixture):
    out = tmp_path / "autograder.zip"
    out.write_text("not a bundle")
    assert grader_main(["autograder", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "not a bundle"
    assert grader_main(["autograder", "--out", str(out), "--force", "--hidden-visibility", "after_due_date",
                        "--timeout-scale", "3", "--timeout", "1200", "--unsafe-no-sandbox"]) == 0
    with zipfile.ZipFile(out) as archive:
        settings = json.loads(archive.read("autograder.json"))
    assert settings.pop("cases") and settings == {"hidden_visibility": "after_due_date", "timeout_scale": 3.0,
                                                  "timeout": 1200.0, "unsafe_no_sandbox": True}
    assert grader_main(["autograder", "--out", str(out), "--force", "--timeout", "3600"]) == 2
    assert "40 minutes" in capsys.readouterr().err


# run_autograder on three submissions


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_reference_scores_100_with_public_tests_visible_and_hidden_ones_after_published(
        bundle: Path, tmp_path: Path):
    payload = run_autograder(autograder_root(bundle, tmp_path, ROOT / "solutions"))
    assert payload["score"] == sum(COMPONENT_POINTS.values())
    assert {test["name"]: test["visibility"] for test in payload["tests"]} == _expected_visibility()
    assert all(test["status"] == "passed" and test["score"] == test["max_score"] for test in payload["tests"])
    assert (payload["output_format"], payload["visibility"], payload["stdout_visibility"]) == (
        "md", "visible", "hidden")
    assert payload["execution_time"] >= 0 and "Public tests:" in payload["output"]


@pytest.mark.sandbox
def test_a_buggy_submission_loses_points_in_visible_public_and_unpublished_hidden_tests(bundle: Path,
                                                                                     tmp_path: Path):
    corpus = load_bugs()
    bug = corpus.BY_NAME["no_scale"]
    submission = corpus.materialize(bug, tmp_path / "bugs")
    root = autograder_root(bundle, tmp_path / "root", submission)
    payload = run_autograder(root, "--only", "attention,quiz")
    failed = [test for test in payload["tests"] if test["status"] == "failed"]
    assert payload["score"] < sum(test["max_score"] for test in payload["tests"])
    assert {test["visibility"] for test in failed} == {"visible", "after_published"}
    assert all(test["score"] == 0 and test["name"].startswith("attention: ") for test in failed)
    assert any(word in test["output"] for test in failed for word in bug.keywords)
    expected = _expected_visibility()
    assert all(expected[test["name"]] == test["visibility"] for test in payload["tests"])
    # The summary, always shown, tells the public tests' results only: nothing of a hidden one.
    assert "Public tests:" in payload["output"] and "when the grades are published" in payload["output"]
    assert not any(test["name"].split(": ")[1].split(" ")[0] in payload["output"] for test in failed)


HOSTILE_QUIZ = '''
"""At import: forge results.json, and take the answers from the bundle's reference."""
import json
import pathlib

ROOT = pathlib.Path({root!r})
try:
    (ROOT / "results" / "results.json").write_text(json.dumps({{"score": 1000, "output": "forged"}}))
except OSError:
    pass
ANSWERS = dict.fromkeys(("q1", "q2", "q3", "q4", "q5", "q6"))
try:
    exec((ROOT / "source" / "solutions" / "quiz.py").read_text(), stolen := {{}})
    ANSWERS = stolen["ANSWERS"]
except OSError:
    pass
'''


@pytest.mark.sandbox
def test_a_hostile_submission_cannot_forge_results_json(bundle: Path, tmp_path: Path):
    submission = tmp_path / "hostile"
    shutil.copytree(ROOT / "examples" / "submissions" / "correct", submission)
    root = tmp_path / "root"
    (submission / "quiz.py").write_text(HOSTILE_QUIZ.format(root=str(root)))
    payload = run_autograder(autograder_root(bundle, root, submission), "--only", "quiz")
    assert "forged" not in json.dumps(payload)
    assert [test["name"].split(": ")[1].split(" ")[0] for test in payload["tests"]] == [
        case.name for case in all_cases(components=("quiz",))]
    assert payload["score"] == sum(test["score"] for test in payload["tests"])
    if mode() in ("root", "setuid"):  # a worker of another user: it cannot read the bundle either
        assert payload["score"] == 0
    # Otherwise (not root) the worker is the user who unzipped the bundle: docs/grading.md says so.


HANG = """
def _hang(*args, **kwargs):
    while True:
        pass


class _Answers(dict):
    copy = keys = items = get = __getitem__ = _hang


for _name, _value in list(globals().items()):  # every function and class of this file hangs when used
    if not _name.startswith("_") and callable(_value) and getattr(_value, "__module__", "") == __name__:
        globals()[_name] = _hang
if "ANSWERS" in globals():
    ANSWERS = _Answers(ANSWERS)
"""


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_submission_that_hangs_everywhere_still_gets_results_within_the_timeout(tmp_path: Path):
    """Built with the least --timeout it takes (135 s: gradescope.minimum_timeout): run_autograder ends
    within it, and results.json has every test: those that ran timed out, the others say they were not
    run for lack of time."""
    bundle = tmp_path / "autograder.zip"
    timeout = minimum_timeout()
    assert grader_main(["autograder", "--out", str(bundle), "--timeout", f"{timeout:g}"]) == 0
    submission = tmp_path / "hangs"
    shutil.copytree(ROOT / "solutions", submission, ignore=shutil.ignore_patterns("__pycache__"))
    for path in submission.glob("*.py"):
        path.write_text(path.read_text() + HANG)
    root = autograder_root(bundle, tmp_path / "root", submission)
    start = time.monotonic()
    payload = run_autograder(root)
    assert time.monotonic() - start < timeout
    assert payload["score"] == 0 and len(payload["tests"]) == len(all_cases()), payload["output"]
    outputs = [test["output"] for test in payload["tests"]]
    assert all(output.startswith(("timed out: ", "not run (time limit): ")) for output in outputs), outputs
    assert any(output.startswith("not run (time limit): ") for output in outputs)
    assert any(output.startswith("timed out: ") for output in outputs)


def test_a_grading_stopped_at_the_timeout_keeps_the_tests_that_had_ended(tmp_path: Path):
    """What `grader grade --progress` wrote before the stop, then every other test: not run."""
    cases = all_cases(components=("quiz",))
    ended = tmp_path / "progress.jsonl"
    passed = [Result(case.name, case.component, case.points, case.points, Status.PASSED, "", case.visibility)
              for case in cases[:2]]
    ended.write_text("".join(json.dumps(result.to_json()) + "\n" for result in passed))
    payload = results(_stopped(ended, "quiz", 600, all_cases()), all_cases())
    VALIDATOR.validate(payload)
    assert [test["status"] for test in payload["tests"]] == ["passed"] * 2 + ["failed"] * (len(cases) - 2)
    assert all(test["output"].startswith("not run (time limit): ") and "timeout of 600 s" in test["output"]
               for test in payload["tests"][2:])
    assert payload["score"] == sum(case.points for case in cases[:2])


def test_an_unreadable_submission_gets_0_and_says_what_to_upload(bundle: Path, tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    payload = run_autograder(autograder_root(bundle, tmp_path / "root", empty))
    assert (payload["score"], payload["tests"]) == (0, [])
    assert "could not be read" in payload["output"] and "`attention.py`" in payload["output"]


def test_an_autograder_that_cannot_run_still_writes_results_json(bundle: Path, tmp_path: Path):
    root = autograder_root(bundle, tmp_path, ROOT / "solutions")
    (root / "source" / "autograder.json").unlink()
    payload = run_autograder(root)
    assert (payload["score"], payload["tests"]) == (0, [])
    assert "stopped before it finished" in payload["output"] and "FileNotFoundError" in payload["output"]


# The conversion, and the schema


def _message(case: Case, status: Status) -> str:
    """What the judge says (a not-attempted case's message names its status already)."""
    said = {Status.PASSED: "", Status.NOT_ATTEMPTED: f"not attempted: {case.doc}"}
    return said.get(status, f"{case.doc}: no")


def _card(components: tuple[str, ...] = ("feedforward", "quiz")) -> dict:
    """A scorecard of these components' cases, with every status in turn."""
    graded = zip(all_cases(components=components), cycle(Status), strict=False)
    return scorecard([Result(case.name, case.component, case.points if status is Status.PASSED else 0.0,
                             case.points, status, _message(case, status), case.visibility)
                      for case, status in graded]).to_json()


@pytest.mark.parametrize("hidden", VISIBILITIES)
def test_each_case_becomes_a_test_with_its_visibility_and_status(hidden: str):
    card = _card()
    payload = results(card, all_cases(), hidden_visibility=hidden, execution_time=3.4)
    VALIDATOR.validate(payload)
    assert payload["score"] == card["score"] and payload["execution_time"] == 3
    expected = _expected_visibility(hidden)
    for test, graded in zip(payload["tests"], card["tests"], strict=True):
        assert test["visibility"] == expected[test["name"]]
        assert test["status"] == ("passed" if graded["status"] == "passed" else "failed")
        assert test["output"].startswith(("passed: ", "failed: ", "not attempted: ", "timed out: ",
                                          "stalled (not a verdict: ask for a regrade): ", "crashed: ",
                                          "grader error: "))
        assert not test["output"].startswith("not attempted: not attempted")
        assert test["number"] == f"{COMPONENTS.index(graded['component']) + 1}.{test['number'].split('.')[1]}"
    public = sum(test["max_score"] for test in payload["tests"] if test["visibility"] == "visible")
    if hidden == "visible":
        assert payload["output"].startswith(f"**Score: {card['score']:g}/{card['max_score']:g}**")
    else:
        assert f"/{public:g} points.**" in payload["output"]


def test_a_test_unknown_to_the_suites_counts_as_hidden_and_a_bad_visibility_is_refused():
    card = _card(("quiz",))
    card["tests"][0] = {**card["tests"][0], "name": "not_a_case"}
    payload = results(card, all_cases(components=("quiz",)))
    assert payload["tests"][0]["visibility"] == "after_published"
    with pytest.raises(ValueError, match="hidden_visibility"):
        results(card, all_cases(components=("quiz",)), hidden_visibility="public")


def test_a_reason_quoted_in_markdown_cannot_close_its_code_block():
    payload = not_graded("a ``` b ```` c", unreadable=True)
    VALIDATOR.validate(payload)
    assert "\n`````\na ``` b ```` c\n`````\n" in payload["output"]


def test_results_json_replaces_whatever_was_planted_at_its_place(tmp_path: Path):
    target = tmp_path / "results" / "results.json"
    (target / "inside").mkdir(parents=True)
    write_results({"score": 1.0}, target)
    assert json.loads(target.read_text()) == {"score": 1.0}


@pytest.mark.parametrize("document", [
    {"score": 1, "visibility": "public"},
    {"tests": [{"name": "no score anywhere"}]},
    {"score": 1, "tests": [{"score": 1, "status": "error"}]},
    {"score": 1, "output_format": "markdown"},
    {"score": 1, "tests": [{"score": 1, "number": 1.1}]},
    {"score": 1, "grade": 1},
])
def test_the_schema_refuses_what_gradescope_does_not_document(document: dict):
    assert not VALIDATOR.is_valid(document)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("hidden", VISIBILITIES)
def test_no_hidden_input_reaches_results_json_at_any_visibility(hidden: str):
    """A hidden test's `[input: ...]` (its seed rebuilds the tensor with the release's strategies) is
    withheld whatever the visibility; a public test's input is the student's to see."""
    card = _card(("quiz",))
    secret = " [input: shape=(2, 3), seed=15580683061648850159] (note: fix attention first)"
    card["tests"] = [{**test, "message": f"differs{secret}"} for test in card["tests"]]
    text = json.dumps(results(card, all_cases(), hidden_visibility=hidden))
    public = [c for c in all_cases(components=("quiz",)) if c.visibility.value == "public"]
    assert text.count("15580683061648850159") == len(public)
    assert "differs [input withheld] (note: fix attention first)" in text
