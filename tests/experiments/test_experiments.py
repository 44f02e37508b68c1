"""`grader experiments`: the quick preset's outputs (report, notebook, self-contained HTML, raw
numbers) are complete and parse, every table and figure says whose code it measures, a rerun reuses
the cached runs, and a study that calls a stub is not run, with one clear line naming it (all of them:
`grader experiments` stops at once)."""
import base64
import csv
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import pytest
import torch

from experiments import cli
from experiments.attention_patterns import head_means, mean_ablated
from experiments.common import Impl, build, change_verdict, fmt, mean_std, verdict
from experiments.report import Output, Section, write
from experiments.runner import describe
from grader.tasks import Task
from helpers import ROOT as REPO

pytestmark = pytest.mark.xdist_group("experiments")  # its module fixtures are costly: one worker builds them

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STUDY_CSVS = ("positional", "norms", "dropout", "attention_patterns", "cost")
REFERENCE = "(code: reference solutions)"


def png_width(path: Path) -> int:
    """The width in pixels, from the PNG's IHDR chunk."""
    return int.from_bytes(path.read_bytes()[16:20], "big")


class Resources(HTMLParser):
    """What an HTML page loads: images by alt text, and every other src/href of script, link, img,
    iframe, source, video and audio."""

    def __init__(self):
        super().__init__()
        self.images, self.loads, self.tables = {}, [], 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        self.tables += tag == "table"
        if tag == "img":
            self.images[attrs.get("alt")] = attrs.get("src", "")
        elif tag in ("script", "link", "iframe", "source", "video", "audio"):
            self.loads += [attrs[k] for k in ("src", "href") if attrs.get(k)]


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
    assert len(figures) >= 10
    for name in figures:
        data = (quick / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 2000, name
        assert png_width(quick / name) >= 1000, f"{name} is narrower than 1000 px"
        pixels = plt.imread(quick / name)
        assert pixels.size and pixels.std() > 0, f"{name} is blank"


@pytest.mark.slow
@pytest.mark.sandbox
def test_every_table_and_figure_says_whose_code_it_is(quick: Path) -> None:
    report = (quick / "report.md").read_text()
    captions = re.findall(r"^\*(?:Table|Figure) \d+\.\d+.*\*$", report, flags=re.M)
    results = json.loads((quick / "results.json").read_text())
    assert len(captions) == sum(len(s["tables"]) + len(s["figures"]) for s in results.values())
    assert all(caption.endswith(f"{REFERENCE}*") for caption in captions)
    assert {s["code"] for s in results.values()} == {"reference solutions"}


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_html_report_holds_every_figure_and_table_and_loads_nothing(quick: Path) -> None:
    results = json.loads((quick / "results.json").read_text())
    page = Resources()
    page.feed((quick / "report.html").read_text())
    figures = {f"Figure {s['number']}.{k}": name for s in results.values()
               for k, name in enumerate(s["figures"], 1)}
    assert set(page.images) == set(figures)
    for alt, name in figures.items():
        src = page.images[alt]
        assert src.startswith("data:image/png;base64,"), alt
        assert base64.b64decode(src.split(",", 1)[1]) == (quick / name).read_bytes(), alt
    html = (quick / "report.html").read_text()
    for s in results.values():
        for k, table in enumerate(s["tables"], 1):
            assert f"Table {s['number']}.{k}. {table['caption']}" in html.replace("&quot;", '"')
    assert page.tables == sum(len(s["tables"]) for s in results.values())
    assert not page.loads, page.loads  # no script, stylesheet or frame fetched from anywhere
    assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import", html)
    notebook = nbformat.read(quick / "report.ipynb", as_version=4)
    nbformat.validate(notebook)
    assert "\n".join(cell.source for cell in notebook.cells).count("](") >= len(figures)


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


def test_untouched_stubs_stop_at_once_naming_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 19: before any run (all 43 used to run, 189 s, only to be skipped)."""
    monkeypatch.chdir(REPO)
    assert grader_experiments("--impl", "exercises", "--quick", "--out", str(tmp_path), "--jobs", "1") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nothing was run" in err
    for study in ("positional", "norms", "dropout", "attention_patterns", "cost"):
        assert f"  {study}: model.TinyTransformerLM is not implemented yet (exercises/model.py)" in err
    assert "attention.causal_mask is not implemented yet (exercises/attention.py)" in err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.json"))
    assert not (tmp_path / "report.md").exists()


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
    # a student's code is labelled with its own name, and numbered as in the full report
    who = results["dropout"]["code"]
    assert re.fullmatch(r"impl \(sha256 [0-9a-f]{8}\)", who)
    report = (out / "report.md").read_text()
    assert "## 3. Dropout" in report and "*Table 3.1. At the end of training" in report
    assert f"(code: {who})*" in report and REFERENCE not in report


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
    section = Section("demo", "Demo", intro="text", findings=["a number: 1.00"], number=1)
    out = Output(tmp_path, "someone")
    write([section], out, tmp_path / "report.md", ["- header"])
    note = "<!-- commentary -->\nHand-written reading, quoting 1.00.\n<!-- /commentary -->\n"
    (tmp_path / "report.md").write_text((tmp_path / "report.md").read_text() + note)
    write([section], out, tmp_path / "report.md", ["- header, rerun"])
    report = (tmp_path / "report.md").read_text()
    assert report.count("Hand-written reading") == 1 and "- header, rerun" in report
    assert report.index("Hand-written") < report.index("## 1. Demo")
    cells = [cell.source for cell in nbformat.read(tmp_path / "report.ipynb", as_version=4).cells]
    assert any("Hand-written reading" in cell for cell in cells)
    assert "Hand-written reading" in (tmp_path / "report.html").read_text()


def test_a_difference_is_called_one_only_beyond_the_spread() -> None:
    assert verdict([1.0, 1.1, 0.9], [1.5, 1.6, 1.4]) == "lower"
    assert verdict([1.0, 1.3, 0.9], [1.5, 1.6, 1.2]) == "within noise"
    assert verdict([1.0], [2.0, 2.1]) == "one seed, no spread"
    assert change_verdict([-0.05, -0.06, -0.04]) == "down"
    assert change_verdict([-0.05, 0.04, 0.0]) == "within noise"
    assert fmt(*mean_std([0.5])) == "0.50" and fmt(*mean_std([0.5, 0.5])) == "0.50 ± 0.00"


def test_mean_ablation_replaces_the_chosen_heads_outputs_and_nothing_else() -> None:
    impl = Impl(REPO / "solutions")
    model = build(impl, vocab_size=7, seed=0, d_model=8, n_heads=2, n_layers=2, d_ff=16)
    batches = [(torch.randint(7, (3, 5), generator=torch.Generator().manual_seed(i)), None) for i in range(2)]
    out_proj = model.blocks[0].attn.out_proj
    means = head_means(model, out_proj, batches)
    seen = []
    out_proj.register_forward_hook(lambda module, args, output: seen.append(args[0]))
    with torch.no_grad():
        model(batches[0][0])
        with mean_ablated(out_proj, [1], 4, means):
            model(batches[0][0])
        model(batches[0][0])
    plain, ablated, after = seen
    assert torch.equal(ablated[..., :4], plain[..., :4]) and torch.equal(after, plain)
    assert torch.equal(ablated[..., 4:], means[:, 4:].expand(3, -1, -1))


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_handouts_figure_numbers_are_the_reports(quick: Path) -> None:
    results = json.loads((quick / "results.json").read_text())
    numbered = {f"{s['number']}.{k}": name for s in results.values()
                for k, name in enumerate(s["figures"], 1)}
    handout = (REPO / "docs" / "lab.md").read_text()
    cited = re.findall(r"(?:Figures?|and)\s+(\d+\.\d+)\s+\(`([\w.]+\.png)`\)", handout)
    assert {name for _, name in cited} == set(numbered.values())  # every figure, each where it is
    assert all(numbered[number] == name for number, name in cited), cited
