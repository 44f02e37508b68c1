"""A class's results: gradebook.csv (a row per student), summary.md (the score histogram, each
component's mean, the per-test failure rates that say what to reteach, who was not graded and
why, flagged similar code) and its figures, scores.png and failures.png."""
import csv
import io
import re
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_atomic
from ..results import markdown_text
from ..spec import COMPONENTS, IMPORTED_BY, Status
from .runner import Outcome
from .similarity import Pair

HEADER = ("student", "total", *COMPONENTS, "status")
BINS = 10
FIGURE_TESTS = 20
"""The failures figure shows the most failed tests, this many at most."""
MESSAGE_CHARS = 90
SIMILAR_PAIRS = 50
"""summary.md lists this many pairs of students at most (similarity.html has them all)."""


@dataclass(frozen=True)
class Row:
    """One student's line: the scorecard (`grader grade --json`) when graded, else why not; `keys`,
    what else an LMS knows the student by (classroom.Submission.keys)."""

    student: str
    status: Outcome
    message: str = ""
    card: dict | None = None
    keys: tuple[str, ...] = ()

    def total(self) -> float | None:
        """The grade: the score when graded, 0 for nothing gradable (empty, unreadable), else None
        (timed out, a test stalled, error, pending: not a grade yet, whatever points a card in part
        holds: they are not a verdict on the student's code)."""
        if self.status is Outcome.GRADED:
            return self.card["score"]
        return 0.0 if self.status in ZERO else None


ZERO = frozenset({Outcome.EMPTY, Outcome.UNREADABLE})
"""Outcomes that are a grade of 0: there was nothing the grader could grade."""


def _points(x: float) -> str:
    return f"{x:g}"


FORMULA = ("=", "+", "-", "@", "\t", "\r")
"""How a cell a spreadsheet reads as a formula starts (OWASP, "CSV Injection")."""


def guarded(text: str) -> str:
    """Text a spreadsheet shows as text: one that starts with FORMULA (a student id such as `+1+1`,
    a roster name `=HYPERLINK(...)`) gets a leading `'`. A number is left as it is (`-1.5`), and so is
    a lone sign (Moodle's `-` for "never"): neither is a formula."""
    if len(text) < 2 or not text.startswith(FORMULA):
        return text
    try:
        float(text)
        return text
    except ValueError:
        return f"'{text}"


def csv_text(lines: Sequence[Sequence[str]]) -> str:
    """A CSV file's text, every cell guarded: each CSV the grader writes goes through here."""
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([[guarded(str(cell)) for cell in line] for line in lines])
    return text.getvalue()


def write_gradebook(rows: Sequence[Row], path: Path) -> None:
    """gradebook.csv: total and component scores of the graded; a total of 0 for what was empty or
    unreadable; blank for the others (and for components the grading left out, with `--only`;
    components of a grading in part are shown: the total is what is not a grade)."""
    lines = [HEADER]
    for row in rows:
        card = row.card or {"components": {}}
        scores = [_points(card["components"][name]["score"]) if name in card["components"] else ""
                  for name in COMPONENTS]
        total = row.total()
        lines.append([row.student, "" if total is None else _points(total), *scores, row.status.value])
    write_atomic(path, csv_text(lines))


def _bins(maximum: float) -> list[tuple[float, float]]:
    edges = [maximum * i / BINS for i in range(BINS + 1)]
    return list(zip(edges, edges[1:], strict=False))


def _histogram(scores: list[float], maximum: float) -> list[int]:
    """Students per tenth of the maximum, the top bin including the maximum itself."""
    counts = [0] * BINS
    for score in scores:
        counts[min(BINS - 1, int(score / maximum * BINS)) if maximum else 0] += 1
    return counts


ONE_CAUSE = "several tests, one message"
"""The reteach row of tests that failed with one cause in one submission (a file that did not import, and
every file that imports it; a function that hangs; a stub another part waits for): counted once per
student, in the row of the component at fault, as the scorecard says it, and not in each test's own
row."""
_IMPORTED_BY = re.compile(re.escape(IMPORTED_BY).replace(re.escape("{problem}"), "(?P<problem>.*)")
                          .replace(re.escape("{module}"), r"\w+") + "$", re.S)


def root_cause(message: str) -> str:
    """A test's message as its cause: a file that imports a broken one says the broken one's problem."""
    imported = _IMPORTED_BY.match(message)
    return imported["problem"] if imported else message


def _causes(card: dict) -> Iterator[tuple[str, str, float, str]]:
    """(component, test or ONE_CAUSE, points lost, message) for each cause of failure in one scorecard."""
    failing = [test for test in card["tests"] if test["status"] != Status.PASSED]
    shared = Counter(root_cause(test["message"]) for test in failing)
    lost: dict[str, tuple[str, float]] = {}
    for test in failing:
        cause = root_cause(test["message"])
        if shared[cause] == 1:
            yield test["component"], test["name"], test["max_score"], test["message"]
            continue
        component, points = lost.get(cause, (test["component"], 0.0))
        at_fault = test["component"] if test["message"] == cause else component  # not one importing it
        lost[cause] = (at_fault, points + test["max_score"])
    for cause, (component, points) in lost.items():
        yield component, ONE_CAUSE, points, cause


def failure_rates(cards: Sequence[dict]) -> list[dict]:
    """Per test (and per component, its ONE_CAUSE row): how many of the graded failed it, the most points
    one lost there, and the commonest message; most failed first."""
    tests: dict[tuple[str, str], dict] = {}

    def entry(component: str, test: str, points: float) -> dict:
        return tests.setdefault((component, test), {"component": component, "test": test, "points": points,
                                                    "failed": 0, "graded": 0, "messages": Counter()})

    for card in cards:
        for test in card["tests"]:
            entry(test["component"], test["name"], test["max_score"])["graded"] += 1
        for component in {test["component"] for test in card["tests"]}:
            entry(component, ONE_CAUSE, 0.0)["graded"] += 1
        for component, test, points, message in _causes(card):
            cause = entry(component, test, points)
            cause["failed"] += 1
            cause["points"] = max(cause["points"], points)
            cause["messages"][message] += 1
    rates = [{**entry, "share": entry["failed"] / entry["graded"]} for entry in tests.values()]
    return sorted(rates, key=lambda e: (-e["share"], COMPONENTS.index(e["component"]), e["test"]))


def _table(header: Sequence[str], rows: list[Sequence]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]


def _short(message: str) -> str:
    """One line of a message (the student's text may be in it), inert in Markdown."""
    line = " ".join(message.split())
    return markdown_text(line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 1] + "…")


def summary(rows: Sequence[Row], version: str, similar: Sequence[Pair] | None = None) -> str:
    """summary.md's text (its figures: write_figures)."""
    cards = [row.card for row in rows if row.card]
    not_graded = [row for row in rows if row.status is not Outcome.GRADED]  # timed out: a card, in part
    counts = Counter(row.status.value for row in rows)
    statuses = [f"{counts[status]} {status}" for status in Outcome if counts[status]]
    lines = [f"# Grades: {len(rows)} students", "", f"{', '.join(statuses)} (grader {version}).", ""]
    lines += _sandbox_lines(cards)
    if any(row.status is Outcome.GRADED for row in rows):
        lines += _score_section(rows)
    if cards:
        lines += _component_section(cards) + _failure_section(cards)
    if not_graded:
        lines += ["## Not graded, or graded in part", "",
                  *_table(("student", "status", "why"),
                          [(markdown_text(row.student), row.status.value, _short(row.message))
                           for row in not_graded]), ""]
    if similar is not None:
        lines += _similarity_section(similar)
    return "\n".join(lines)


def _sandbox_lines(cards: list[dict]) -> list[str]:
    """Which sandbox modes the gradings ran in, and what each isolates."""
    modes = Counter((card.get("sandbox") or {}).get("mode", "unknown") for card in cards)
    isolates = {card["sandbox"]["mode"]: card["sandbox"]["isolates"] for card in cards if card.get("sandbox")}
    return [f"Sandbox: {mode} for {count} graded ({isolates.get(mode, 'not recorded')})."
            for mode, count in sorted(modes.items())] + ([""] if modes else [])


def _graded(rows: Sequence[Row]) -> list[dict]:
    """The scorecards of the graded: a grading that did not end (timed out, stalled) is no grade."""
    return [row.card for row in rows if row.status is Outcome.GRADED]


def _score_section(rows: Sequence[Row]) -> list[str]:
    """The histogram and figures of the graded, saying who they leave out."""
    cards = _graded(rows)
    scores, maximum = [card["score"] for card in cards], max(card["max_score"] for card in cards)
    counts = _histogram(scores, maximum)
    table = [(f"{_points(round(low, 2))}–{_points(round(high, 2))}", n, "█" * n)
             for (low, high), n in zip(_bins(maximum), counts, strict=True)]
    zeros = sum(row.status in ZERO for row in rows)
    left = len(rows) - len(cards) - zeros
    said = [f"Out of {_points(maximum)}, over the {len(cards)} graded submissions: mean "
            f"{statistics.mean(scores):.1f}, median {_points(statistics.median(scores))}, lowest "
            f"{_points(min(scores))}, highest {_points(max(scores))}."]
    if zeros:
        said.append(f"Not in these figures: {zeros} empty or unreadable, 0 in gradebook.csv (the mean with "
                    f"them: {statistics.mean(scores + [0.0] * zeros):.1f}).")
    if left:
        said.append(f"Nor the {left} whose grading did not end (timed out, stalled, error or pending: "
                    "below).")
    return ["## Scores", "", " ".join(said), "", "![Score histogram](scores.png)", "",
            *_table(("score", "students", ""), table), ""]


def _component_section(cards: list[dict]) -> list[str]:
    rows = []
    for name in COMPONENTS:
        mine = [card["components"][name] for card in cards if name in card["components"]]
        if mine:
            full = sum(c["score"] == c["max_score"] for c in mine)
            mean = statistics.mean(c["score"] for c in mine)
            rows.append((name, _points(mine[0]["max_score"]), f"{mean:.1f}", f"{full / len(mine):.0%}"))
    return ["## Components", "", *_table(("component", "points", "mean", "full marks"), rows), ""]


def _failure_section(cards: list[dict]) -> list[str]:
    failing = [rate for rate in failure_rates(cards) if rate["failed"]]
    if not failing:
        return ["## Tests failed", "", "Every graded submission passed every test.", ""]
    rows = [(f"{rate['share']:.0%}", f"{rate['failed']}/{rate['graded']}", rate["component"], rate["test"],
             ("up to " if rate["test"] == ONE_CAUSE else "") + _points(rate["points"]),
             _short(rate["messages"].most_common(1)[0][0])) for rate in failing]
    return ["## Tests failed (what to reteach): the share of the graded students who failed each test", "",
            f"Each cause counts once per student: where several tests failed with one cause (a file that did "
            f"not import, in every component that imports it too; a function that hangs; a stub another part "
            f"waits for), that student counts once, in the row \"{ONE_CAUSE}\" of the component at fault, "
            f"not in each test's row.", "",
            "![Share of the graded students failing each test](failures.png)", "",
            *_table(("share failing", "failed / graded", "component", "test", "points", "commonest message"),
                    rows), ""]


def _similarity_section(similar: Sequence[Pair]) -> list[str]:
    """One row per pair of students: the files flagged, and the largest share of one in the other."""
    lines = ["## Similar code", "",
             "Pairs of students whose same file shares much of its code beyond the stubs handed out "
             "(copydetect; side by side in [similarity.html](similarity.html)). A lead to look at, "
             "not a verdict.",
             ""]
    if not similar:
        return lines + ["No pair above the threshold.", ""]
    students: dict[tuple[str, str], list[Pair]] = {}
    for pair in similar:
        students.setdefault((pair.first, pair.second), []).append(pair)
    ranked = sorted(students.items(), key=lambda item: (-len(item[1]), -_largest(item[1]), item[0]))
    rows = [(first, second, len(pairs), f"{_largest(pairs):.0%}", ", ".join(sorted(p.file for p in pairs)))
            for (first, second), pairs in ranked[:SIMILAR_PAIRS]]
    lines += _table(("student", "student", "files", "largest share", "flagged files"), rows) + [""]
    if len(ranked) > SIMILAR_PAIRS:
        lines += [f"And {len(ranked) - SIMILAR_PAIRS} more pairs in similarity.html.", ""]
    return lines


def _largest(pairs: Sequence[Pair]) -> float:
    return max(max(pair.first_share, pair.second_share) for pair in pairs)


def write_figures(rows: Sequence[Row], out: Path) -> list[Path]:
    """scores.png and failures.png (nothing without a graded submission)."""
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    cards, graded = [row.card for row in rows if row.card], _graded(rows)
    if not graded:
        return []
    maximum = max(card["max_score"] for card in graded)
    scores = Figure(figsize=(6, 3.2), dpi=100)
    axes = scores.subplots()
    axes.hist([card["score"] for card in graded], bins=[edge for edge, _ in _bins(maximum)] + [maximum],
              color="#4c72b0", edgecolor="white")
    axes.set(xlabel=f"score (out of {_points(maximum)})", ylabel="students",
             title=f"Scores of the {len(graded)} graded submissions")
    failing = [rate for rate in failure_rates(cards) if rate["failed"]][:FIGURE_TESTS]
    failures = Figure(figsize=(7, 1.2 + 0.3 * max(1, len(failing))), dpi=100)
    axes = failures.subplots()
    axes.barh([f"{rate['component']}: {rate['test']}" for rate in failing][::-1],
              [100 * rate["share"] for rate in failing][::-1], color="#c44e52")
    axes.set(xlabel="graded students failing it (%)", xlim=(0, 100),
             title=f"The {len(failing)} most failed tests")
    written = []
    for figure, name in ((scores, "scores.png"), (failures, "failures.png")):
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        write_atomic(out / name, buffer.getvalue())
        written.append(out / name)
    return written
