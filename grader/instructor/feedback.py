"""Feedback to hand back: DIR/feedback/<student>.md and .html (`grade-all --feedback`).

Per component the score; every public test with its result and message (what `grader check`
shows the student anyway); hidden tests by the instructor's policy (HIDDEN), as Gradescope shows
tests published after the deadline: `score` (the default) gives each component's hidden points
only, `name` adds each hidden test's name and result, `full` its message too. A hidden test's
drawn input (the judge's "[input: ...]") is never written, whatever the policy, nor is the salt
(no scorecard holds it): what a student learns of the hidden tests is what the policy says.

The HTML is one self-contained file (inline style, no script, a Content-Security-Policy that
loads nothing) in which every text is escaped: a student's own text quoted in a message (their
quiz answer, their exception) is shown, never interpreted as markup.
"""
import html
from pathlib import Path

from ..archive import deterministic_zip
from ..atomic import write_atomic
from ..spec import COMPONENTS, Status, Visibility
from .gradebook import Row
from .gradescope import SAYS, _code_block, withheld

HIDDEN = ("score", "name", "full")
UPLOAD = "lms_upload.zip"
"""DIR/feedback/UPLOAD: each page of a student from an LMS export, named as that LMS's bulk feedback
upload files it (classroom.Submission.handback)."""
_POLICY = "default-src 'none'; style-src 'unsafe-inline'"  # loads nothing, runs nothing
_STYLE = ("body{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em;color:#222}"
          "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
          "pre{white-space:pre-wrap;background:#f6f6f6;padding:.4em;margin:.2em 0 .8em}"
          ".passed{color:#1a7f37}.failed{color:#c62828}")


def _points(x: float) -> str:
    return f"{x:g}"


def _component(card: dict, name: str, hidden: str) -> dict:
    """One component's part of the feedback, as data both formats render."""
    mine = [t for t in card["tests"] if t["component"] == name]
    public = [t for t in mine if t["visibility"] == Visibility.PUBLIC]
    secret = [t for t in mine if t["visibility"] != Visibility.PUBLIC]
    shown = [(t["name"], Status(t["status"]), t["score"], t["max_score"], t["message"]) for t in public]
    if hidden != "score":
        shown += [(f"{t['name']} (hidden)", Status(t["status"]), t["score"], t["max_score"],
                   withheld(t["message"]) if hidden == "full" else "") for t in secret]
    totals = card["components"][name]
    return {"name": name, "score": totals["score"], "max_score": totals["max_score"], "tests": shown,
            "hidden": (sum(t["score"] for t in secret), sum(t["max_score"] for t in secret), len(secret))}


def _parts(row: Row, hidden: str) -> list[dict]:
    return [_component(row.card, name, hidden) for name in COMPONENTS if name in row.card["components"]]


def markdown(row: Row, hidden: str = "score") -> str:
    """The feedback as Markdown (messages in code blocks: nothing of the student's is rendered)."""
    lines = [f"# Feedback: {row.student}", ""]
    if not row.card:
        return "\n".join(lines + [f"**Score: 0.** Your submission could not be graded ({row.status.value}):",
                                  "", _code_block(row.message), ""])
    lines += [f"**Score: {_points(row.card['score'])}/{_points(row.card['max_score'])}**", ""]
    for part in _parts(row, hidden):
        lines += [f"## {part['name']}: {_points(part['score'])}/{_points(part['max_score'])}", ""]
        for name, status, score, most, message in part["tests"]:
            lines.append(f"- `{name}`: {SAYS[status]} ({_points(score)}/{_points(most)})")
            if message:
                lines += ["", _code_block(message), ""]
        got, most, count = part["hidden"]
        if count and hidden == "score":
            lines.append(f"- hidden tests ({count}): {_points(got)}/{_points(most)}")
        lines.append("")
    return "\n".join(lines)


def page(row: Row, hidden: str = "score") -> str:
    """The feedback as one self-contained HTML page, every text escaped."""
    e = html.escape
    body = [f"<h1>Feedback: {e(row.student)}</h1>"]
    if not row.card:
        body += [f"<p><strong>Score: 0.</strong> Your submission could not be graded "
                 f"({e(row.status.value)}):</p>", f"<pre>{e(row.message)}</pre>"]
    else:
        body.append(f"<p><strong>Score: {_points(row.card['score'])}/{_points(row.card['max_score'])}"
                    "</strong></p>")
        for part in _parts(row, hidden):
            body += [f"<h2>{e(part['name'])}: {_points(part['score'])}/{_points(part['max_score'])}</h2>",
                     "<table><tr><th>test</th><th>result</th><th>points</th></tr>"]
            for name, status, score, most, message in part["tests"]:
                css = "passed" if status is Status.PASSED else "failed"
                detail = f"<pre>{e(message)}</pre>" if message else ""
                body.append(f"<tr><td>{e(name)}{detail}</td><td class=\"{css}\">{SAYS[status]}</td>"
                            f"<td>{_points(score)}/{_points(most)}</td></tr>")
            got, most, count = part["hidden"]
            if count and hidden == "score":
                body.append(f"<tr><td>hidden tests ({count})</td><td></td><td>{_points(got)}/{_points(most)}"
                            "</td></tr>")
            body.append("</table>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        f"<title>Feedback: {e(row.student)}</title><style>{_STYLE}</style></head><body>",
        *body, "</body></html>", ""])


def write_feedback(rows: list[Row], out: Path, hidden: str = "score",
                   handback: dict[str, str] | None = None) -> list[Path]:
    """out/<student>.md and .html for each student with a grade (graded, or 0 for nothing
    gradable); an older file of a student without one now is removed (a grading that did not end
    gives no feedback yet: its points so far are no verdict). With `handback` (student -> the name
    the LMS's bulk upload expects), also out/UPLOAD holding those students' pages under those names."""
    if hidden not in HIDDEN:
        raise ValueError(f"--hidden {hidden}: one of {', '.join(HIDDEN)}")
    out.mkdir(exist_ok=True)
    written, uploads = [], []
    for row in rows:
        files = (out / f"{row.student}.md", out / f"{row.student}.html")
        if row.total() is None:
            for path in files:
                path.unlink(missing_ok=True)
            continue
        write_atomic(files[0], markdown(row, hidden) + "\n")
        write_atomic(files[1], page(row, hidden))
        written += files
        if (handback or {}).get(row.student):
            uploads.append((handback[row.student], files[1].read_bytes()))
    (out / UPLOAD).unlink(missing_ok=True)
    if uploads:
        write_atomic(out / UPLOAD, deterministic_zip(sorted(uploads)))
        written.append(out / UPLOAD)
    return written
