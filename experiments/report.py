"""Turning study sections into report.md, results.json and one CSV per study, plus the
figure and table helpers the studies use (matplotlib with the Agg backend, small PNGs)."""
import csv
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed (CI, servers)
import matplotlib.pyplot as plt  # noqa: E402

from .runner import Run, clean  # noqa: E402

DPI = 80  # committed figures stay small
KEEP = re.compile(r"<!-- commentary -->.*?<!-- /commentary -->\n", re.S)  # hand-written, survives reruns


@dataclass
class Table:
    caption: str
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = [f"*{self.caption}*", "", "| " + " | ".join(self.header) + " |",
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


def split(pairs: list[tuple[Run, dict]]) -> tuple[list[tuple[Run, dict]], list[str], list[str]]:
    """(run, result) of the runs that worked, and the distinct skip and error messages."""
    ok = [(run, outcome["result"]) for run, outcome in pairs if outcome["status"] == "ok"]
    skipped = list(dict.fromkeys(o["message"] for _, o in pairs if o["status"] == "skipped"))
    errors = list(dict.fromkeys(f"{run.label}: {o['message']}" for run, o in pairs if o["status"] == "error"))
    return ok, skipped, errors


def figure(out: Path, name: str, fig: plt.Figure) -> str:
    """Save `fig` as out/name (PNG) and close it; returns the file name."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def _section_markdown(number: int, s: Section, figures_prefix: str) -> str:
    parts = [f"## {number}. {s.title}", "", s.intro.strip(), ""]
    for message in s.skipped:
        parts.append(f"- **skipped:** {message}")
    for message in s.errors:
        parts.append(f"- **error:** {message}")
    if s.skipped or s.errors:
        parts.append("")
    if s.findings:
        parts += ["**Findings**", ""] + [f"- {f}" for f in s.findings] + [""]
    for table in s.tables:
        parts += [table.markdown(), ""]
    for name, caption in s.figures:
        parts += [f"![{caption}]({figures_prefix}{name})", "", f"*{caption}*", ""]
    if s.rows:
        parts += [f"Raw numbers: [{s.key}.csv]({figures_prefix}{s.key}.csv), "
                  f"[results.json]({figures_prefix}results.json).", ""]
    return "\n".join(parts)


def write(sections: list[Section], out: Path, report: Path, header: list[str]) -> None:
    """report.md (markdown), out/results.json (every section's data) and out/<key>.csv.

    A block between <!-- commentary --> and <!-- /commentary --> in an existing report is kept.
    """
    prefix = os.path.relpath(out, report.parent).replace(os.sep, "/") + "/"
    prefix = "" if prefix == "./" else prefix
    skipped = [f"- {s.title}: {m}" for s in sections for m in s.skipped]
    body = ["# Module 9 Transformer lab: experiment report", ""] + header + [""]
    kept = KEEP.search(report.read_text()) if report.is_file() else None
    if kept:
        body += [kept.group(0)]
    if skipped:
        body += ["**Skipped** (implement these exercises and rerun; finished runs are reused):", ""]
        body += skipped + [""]
    body += [_section_markdown(i, s, prefix) for i, s in enumerate(sections, 1)]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(body).rstrip() + "\n")
    results = {s.key: {"title": s.title, "findings": s.findings, "skipped": s.skipped,
                       "errors": s.errors, "tables": [asdict(t) for t in s.tables], "data": s.data}
               for s in sections}
    (out / "results.json").write_text(json.dumps(clean(results), indent=1, allow_nan=False))
    for s in sections:
        if s.rows:
            with open(out / f"{s.key}.csv", "w", newline="") as f:
                columns = list(dict.fromkeys(k for row in s.rows for k in row))
                writer = csv.DictWriter(f, fieldnames=columns, restval="")
                writer.writeheader()
                writer.writerows(clean(s.rows))
