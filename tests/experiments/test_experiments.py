"""`grader experiments`: the quick preset's outputs are complete and parse, a rerun reuses the
cached runs, and stubbed exercises are skipped with one clear line each (exit code 0)."""
import csv
import json
import re
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch

from experiments import cli
from experiments.common import Impl
from experiments.report import Section, write
from experiments.runner import describe
from grader.tasks import Task
from helpers import ROOT as REPO

pytestmark = pytest.mark.xdist_group("experiments")  # its module fixtures are costly: one worker builds them

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STUDY_CSVS = ("positional", "norms", "dropout", "attention_patterns", "cost")


def grader_experiments(*argv: str) -> int:
    """`grader experiments ARGS`, as the grader's CLI runs its plugin command."""
    return cli.main(list(argv))


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quick")
    assert grader_experiments("--impl", str(REPO / "solutions"), "--quick", "--out", str(out)) == 0
    return out


@pytest.mark.slow
@pytest.mark.sandbox
def test_quick_report_links_every_figure_and_skips_nothing(quick: Path) -> None:
    report = (quick / "report.md").read_text()
    for number, title in enumerate(["Positional encodings", "Pre- vs post-norm", "Dropout",
                                    "Attention patterns", "Cost"], 1):
        assert f"## {number}. {title}" in report
    assert "**skipped:**" not in report and "**error:**" not in report
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)
    assert len(figures) >= 7
    for name in figures:
        data = (quick / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 2000, name
        pixels = plt.imread(quick / name)
        assert pixels.size and pixels.std() > 0, f"{name} is blank"


@pytest.mark.slow
@pytest.mark.sandbox
def test_quick_tables_are_complete_and_raw_numbers_parse(quick: Path) -> None:
    results = json.loads((quick / "results.json").read_text())
    assert set(results) == set(STUDY_CSVS)
    for key, study in results.items():
        assert study["tables"] and study["findings"], key
        for table in study["tables"]:
            assert table["rows"], (key, table["caption"])
            for row in table["rows"]:
                assert len(row) == len(table["header"]), (key, row)
                assert all(str(c) not in ("", "skipped", "n/a") for c in row), (key, row)
    for key in STUDY_CSVS:
        rows = list(csv.DictReader(open(quick / f"{key}.csv")))
        assert rows, key
    positional = list(csv.DictReader(open(quick / "positional.csv")))
    assert {r["encoding"] for r in positional} == {"sinusoidal", "learned", "rope", "alibi", "none"}
    assert all(0 <= float(r["acc@4"]) <= 1 for r in positional)


@pytest.mark.slow
@pytest.mark.sandbox
def test_rerun_reuses_cached_runs(quick: Path, capsys: pytest.CaptureFixture) -> None:
    runs = len(list((quick / "runs").rglob("*.json")))
    assert grader_experiments("--impl", str(REPO / "solutions"), "--quick", "--out", str(quick)) == 0
    header = (quick / "report.md").read_text()
    assert f"{runs} runs ({runs} reused from the cache" in header
    assert f"({runs} cached)" in capsys.readouterr().err
    assert (quick / "runs" / ".gitignore").read_text().strip().endswith("*")


def test_stubbed_exercises_are_skipped_with_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert grader_experiments("--impl", "exercises", "--quick", "--out", str(tmp_path), "--jobs", "1") == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for study in ("positional", "norms", "dropout", "attention_patterns", "cost"):
        assert f"{study}: skipped: model.TinyTransformerLM is not implemented yet (exercises/model.py)" in err
    report = (tmp_path / "report.md").read_text()
    assert report.count(
        "**skipped:** model.TinyTransformerLM is not implemented yet (exercises/model.py)") == 5
    assert "attention.causal_mask is not implemented yet (exercises/attention.py)" in report
    assert json.loads((tmp_path / "results.json").read_text())["norms"]["skipped"]


@pytest.mark.slow
def test_one_stubbed_function_skips_only_what_needs_it(tmp_path: Path) -> None:
    impl = tmp_path / "impl"
    shutil.copytree(REPO / "solutions", impl)
    source = (impl / "analysis.py").read_text()
    (impl / "analysis.py").write_text(source.replace(
        "    return -torch.special.xlogy(weights, weights).sum(dim=-1).mean(dim=-1)",
        "    raise NotImplementedError"))
    out = tmp_path / "out"
    assert grader_experiments("--impl", str(impl), "--quick", "--out", str(out), "--jobs", "1",
                       "--only", "attention_patterns", "dropout") == 0
    results = json.loads((out / "results.json").read_text())
    assert results["attention_patterns"]["skipped"] == [
        f"analysis.attention_entropy is not implemented yet ({impl / 'analysis.py'})"]
    assert not results["dropout"]["skipped"] and results["dropout"]["tables"]


def test_an_exception_becomes_one_line_naming_where_it_was_raised(tmp_path: Path) -> None:
    shutil.copytree(REPO / "solutions", tmp_path / "impl")
    impl = Impl(tmp_path / "impl")
    try:
        impl.positional.sinusoidal_encoding(4, 3)
    except ValueError as exc:
        outcome = describe(exc, impl)
    assert outcome["status"] == "error"
    assert outcome["message"].startswith(
        "ValueError: d_model=3 must be even (in positional.sinusoidal_encoding, ")
    assert "\n" not in outcome["message"]


def test_dyck_answer_closes_the_prompt_innermost_first() -> None:
    task = Task("dyck", length=10, n_symbols=6)  # 3 bracket kinds: openers 0-2, closers 3-5
    seq, start = task.sequences(64, torch.Generator().manual_seed(0))
    for row in seq.tolist():
        prompt, answer = row[: start - 1], row[start:]
        assert row[start - 1] == task.sep and len(answer) == task.length
        stack = []
        for token in prompt + [t for t in answer if t != task.sep]:
            if token < 3:
                stack.append(token)
            else:
                assert stack and stack.pop() == token - 3, row  # closes the innermost open bracket
        assert not stack, row
        closers = [t for t in answer if t != task.sep]
        assert answer == closers + [task.sep] * (task.length - len(closers)), row
    with pytest.raises(ValueError, match="n_symbols=5"):
        Task("dyck", 4, 5)


def test_rewriting_a_report_keeps_its_commentary_block(tmp_path: Path) -> None:
    section = Section("demo", "Demo", intro="text", findings=["a number: 1.00"])
    write([section], tmp_path, tmp_path / "report.md", ["- header"])
    note = "<!-- commentary -->\nHand-written reading, quoting 1.00.\n<!-- /commentary -->\n"
    (tmp_path / "report.md").write_text((tmp_path / "report.md").read_text() + note)
    write([section], tmp_path, tmp_path / "report.md", ["- header, rerun"])
    report = (tmp_path / "report.md").read_text()
    assert report.count("Hand-written reading") == 1 and "- header, rerun" in report
    assert report.index("Hand-written") < report.index("## 1. Demo")
