"""Turning study sections into the report: report.md, the same as a notebook and as one
self-contained HTML page (notebook.py), results.json and one CSV per study.

Every table and figure is numbered by its study's section (Table 2.1, Figure 2.1, whatever
--only selects) and labelled with whose code produced it (Output.who), so a student's report
and the reference's can be put side by side.
"""
import csv
import io
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import notebook
from .plots import DPI, Figure, plt
from .runner import Run, clean, write_atomic

KEEP = re.compile(r"<!-- commentary -->.*?<!-- /commentary -->\n", re.S)  # hand-written, survives reruns
TITLE = "Module 9 Transformer lab: experiment report"


@dataclass
class Table:
    caption: str
    header: list[str]
    rows: list[list[str]]

    def markdown(self, name: str, who: str) -> str:
        lines = [f"*{name}. {self.caption} (code: {who})*", "", "| " + " | ".join(self.header) + " |",
                 "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass
class Section:
    """One study's part of the report."""

    key: str  # the study module, also the stem of its CSV file
    title: str
    intro: str
    findings: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (PNG file name, caption)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # raw numbers for results.json
    rows: list[dict] = field(default_factory=list)  # one per run, for <key>.csv
    number: int = 0  # its place in the report (the study's place in the full list)


@dataclass(frozen=True)
class Output:
    """Where a report's files go, and whose code it measures (stamped on every figure)."""

    directory: Path
    who: str

    def figure(self, name: str, fig: Figure, title: str = "") -> str:
        """Save fig as directory/name (PNG, under its title and whose code it shows) and close it."""
        fig.suptitle(f"{title}\n" * bool(title) + f"code: {self.who}", fontsize=11)
        fig.savefig(self.directory / name, dpi=DPI)  # constrained layout keeps every label inside
        plt.close(fig)
        return name


def prose(docstring: str) -> str:
    """A study module's docstring without its title line: its paragraphs, each on one line."""
    return "\n\n".join(" ".join(p.split()) for p in docstring.split("\n\n")[1:])


def split(pairs: list[tuple[Run, dict]]) -> tuple[list[tuple[Run, dict]], list[str], list[str]]:
    """(run, result) of the runs that worked, and the distinct skip and error messages."""
    ok = [(run, outcome["result"]) for run, outcome in pairs if outcome["status"] == "ok"]
    skipped = list(dict.fromkeys(o["message"] for _, o in pairs if o["status"] == "skipped"))
    errors = list(dict.fromkeys(f"{run.label}: {o['message']}" for run, o in pairs if o["status"] == "error"))
    return ok, skipped, errors


def _section_markdown(s: Section, who: str, prefix: str) -> str:
    parts = [f"## {s.number}. {s.title}", "", s.intro.strip(), ""]
    for message in s.skipped:
        parts.append(f"- **skipped:** {message}")
    for message in s.errors:
        parts.append(f"- **error:** {message}")
    if s.skipped or s.errors:
        parts.append("")
    if s.findings:
        parts += ["**Findings**", ""] + [f"- {f}" for f in s.findings] + [""]
    for k, table in enumerate(s.tables, 1):
        parts += [table.markdown(f"Table {s.number}.{k}", who), ""]
    for k, (name, caption) in enumerate(s.figures, 1):
        parts += [f"![Figure {s.number}.{k}]({prefix}{name})", "",
                  f"*Figure {s.number}.{k} (`{name}`). {caption} (code: {who})*", ""]
    if s.rows:
        parts += [f"Raw numbers: [{s.key}.csv]({prefix}{s.key}.csv), "
                  f"[results.json]({prefix}results.json).", ""]
    return "\n".join(parts).rstrip()


def parts(sections: list[Section], who: str, header: list[str], commentary: str, prefix: str) -> list[str]:
    """The report's markdown in parts: title and header, the commentary, what was skipped, each section.
    Figures and raw numbers are linked as prefix + file name."""
    out = ["\n".join([f"# {TITLE}", ""] + header)]
    out += [commentary.strip()] if commentary else []
    skipped = [f"- {s.title}: {m}" for s in sections for m in s.skipped]
    if skipped:
        out.append("\n".join(["**Skipped** (implement these exercises and rerun; finished runs are reused):",
                              ""] + skipped))
    return out + [_section_markdown(s, who, prefix) for s in sections]


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(dict.fromkeys(k for row in rows for k in row)),
                            restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(clean(rows))
    return buffer.getvalue()


def write(sections: list[Section], out: Output, report: Path,
          header: list[str]) -> tuple[dict[str, Path], list[str]]:
    """report.md, its notebook and HTML (out/report.ipynb, out/report.html), out/results.json and
    out/<key>.csv. Returns what was written by kind, and why the HTML was not (when nbconvert is
    missing or cannot find its templates: the rest of the report does not depend on it).

    A block between <!-- commentary --> and <!-- /commentary --> in an existing report is kept.
    """
    directory = out.directory
    prefix = os.path.relpath(directory, report.parent).replace(os.sep, "/") + "/"
    prefix = "" if prefix == "./" else prefix
    kept = KEEP.search(report.read_text()) if report.is_file() else None
    commentary = kept.group(0) if kept else ""
    written = {"notebook": directory / "report.ipynb", "html": directory / "report.html"}
    book = notebook.build(parts(sections, out.who, header, commentary, ""), TITLE)
    notebook.write(book, written["notebook"])
    problems = []
    try:
        notebook.write_html(book, written["html"])
    except (ImportError, OSError, LookupError, ValueError) as exc:  # no nbconvert, or no templates
        problems.append(f"{written.pop('html').name} not written: {type(exc).__name__}: "
                        f"{(str(exc).strip().splitlines() or [''])[0]}")
    links = " and ".join(f"[{path.name}]({prefix}{path.name})" for path in written.values())
    header = header + [f"- The same report in one file: {links} (the web page embeds every figure)."]
    report.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(report, "\n\n".join(parts(sections, out.who, header, commentary, prefix)) + "\n")
    written["markdown"] = report
    results = {s.key: {"title": s.title, "number": s.number, "code": out.who, "findings": s.findings,
                       "skipped": s.skipped, "errors": s.errors, "tables": [asdict(t) for t in s.tables],
                       "figures": [name for name, _ in s.figures], "data": s.data}
               for s in sections}
    write_atomic(directory / "results.json", json.dumps(clean(results), indent=1, allow_nan=False))
    for s in sections:
        if s.rows:
            write_atomic(directory / f"{s.key}.csv", _csv(s.rows))
    return written, problems
