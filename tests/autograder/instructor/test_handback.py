"""What goes back to students (grader/instructor/feedback.py): per component the score, every public
test with its message, hidden tests by the instructor's policy and never their drawn inputs; the HTML
escaped, checked in a real headless browser (Chromium) on a class graded by grade-all (--only quiz,
which grade-all refuses with --lms: the Canvas gradebook of a graded class is test_course.py's)."""
import html.parser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.instructor.feedback import markdown, page, withheld, write_feedback
from grader.instructor.gradebook import Row
from grader.instructor.runner import Outcome
from helpers import EXAMPLES

SECRET = "[input: n=7, seed=123456]"


def _test(name: str, visibility: str, status: str, message: str = "", points: float = 1.0) -> dict:
    return {"name": name, "component": "attention", "score": points if status == "passed" else 0.0,
            "max_score": points, "status": status, "message": message, "visibility": visibility}


CARD = {"score": 2.0, "max_score": 4.0, "components": {"attention": {"score": 2.0, "max_score": 4.0}},
        "tests": [_test("public_shape", "public", "passed"),
                  _test("public_scale", "public", "failed", "scores are not scaled [input: d=4]"),
                  _test("hidden_mask", "hidden", "passed"),
                  _test("hidden_grad", "hidden", "failed",
                        f"gradient differs {SECRET} (note: fix positional first)")]}


@pytest.mark.parametrize("hidden", ["score", "name", "full"])
def test_hidden_tests_are_shown_by_the_policy_and_never_their_inputs(hidden):
    row = Row("ada", Outcome.GRADED, card=CARD)
    for text in (markdown(row, hidden), page(row, hidden)):
        assert "public_scale" in text and "scores are not scaled [input: d=4]" in text  # public: all of it
        assert ("hidden_grad" in text) is (hidden != "score")
        assert ("gradient differs" in text) is (hidden == "full")
        assert "seed=123456" not in text and "n=7" not in text
    if hidden == "score":
        assert "- hidden tests (2): 1/2" in markdown(row, hidden)
    if hidden == "full":
        assert "gradient differs [input withheld] (note: fix positional first)" in markdown(row, hidden)


def test_an_input_cut_short_by_the_message_limit_is_withheld_too():
    cut = "differs [input: x=tensor([1, 2, 3... (400 more characters)"
    assert withheld(cut) == "differs [input withheld]"


def test_feedback_files_for_graded_and_zero_only(tmp_path):
    rows = [Row("ada", Outcome.GRADED, card=CARD), Row("bob", Outcome.EMPTY, "bob/ holds no file"),
            Row("eve", Outcome.TIMED_OUT, "ran past 900 s")]
    (tmp_path / "eve.md").parent.mkdir(exist_ok=True)
    (tmp_path / "eve.md").write_text("an old grade")
    written = write_feedback(rows, tmp_path)
    assert sorted(p.name for p in written) == ["ada.html", "ada.md", "bob.html", "bob.md"]
    assert not (tmp_path / "eve.md").exists()
    assert "**Score: 0.**" in (tmp_path / "bob.md").read_text()


HOSTILE = "<script>document.body.setAttribute('data-pwned', '1')</script><img src=x onerror=alert(1)>"
CANVAS_ROSTER = ("Student,ID,SIS User ID,SIS Login ID,Section,Transformer lab (4102)\n"
                 "    Points Possible,,,,,100\n"
                 '"Lovelace, Ada",51,S314,ada@uni.edu,CS 101,\n')


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]


BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--enable-logging=stderr")
"""No /dev/shm and none of the browser's own network traffic (this machine refuses it); its log on
stderr, so that a failure says where."""


def _render(chromium: str, page: Path, profile: Path) -> str:
    """The DOM Chromium builds from `page`, with a profile of its own. The browser inherits this
    process's limits: it died of SIGTRAP at start-up (its allocator's 34 GiB reservation refused)
    while an in-process grading left this process a 4 GiB address-space limit
    (test_cli_writes_the_spec_json checks that it no longer does)."""
    command = [chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "<body" in dom.stdout, f"exit {dom.returncode}: {dom.stderr[-4000:]}"
    return dom.stdout


@pytest.mark.slow
@pytest.mark.smoke  # a real browser in every run
@pytest.mark.sandbox
def test_grade_all_hands_back_escaped_feedback_and_a_canvas_gradebook(tmp_path):
    """ada's quiz answer is markup (Canvas file names, user id 51); Chromium renders her feedback page:
    no element or attribute of hers is in its DOM, her text is shown as text."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium: apt-get install chromium (Debian) to check the feedback page in a browser")
    export = tmp_path / "canvas"
    export.mkdir()
    quiz = (EXAMPLES / "correct" / "quiz.py").read_text() + f"\nANSWERS['q1'] = {HOSTILE!r}\n"
    (export / "lovelaceada_51_9001_quiz.py").write_text(quiz)
    roster = tmp_path / "roster.csv"
    roster.write_text(CANVAS_ROSTER)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "grader.cli", "grade-all", str(export), "--out", str(out),
               "--only", "quiz", "--feedback", "--lms", "canvas", "--roster", str(roster)]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "--only quiz with --lms" in refused.stderr  # a part is not the grade
    done = subprocess.run([arg for arg in command if arg not in ("--lms", "canvas", "--roster", str(roster))],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    feedback = out / "feedback" / "lovelaceada_51.html"
    dom = _render(chromium, feedback, tmp_path / "profile")
    elements = _Elements()
    elements.feed(dom)
    assert "script" not in elements.tags and "img" not in elements.tags
    assert "data-pwned" not in elements.attributes and "onerror" not in elements.attributes
    assert "quiz_answers_format" in dom and "&lt;script&gt;document.body" in dom


def test_every_status_has_a_mark_and_renders():
    """A test of any status, hidden or public, renders in both formats (grade-all --feedback once
    crashed on a stalled test: KeyError); this fails as soon as a status has no mark."""
    from grader.instructor.gradescope import SAYS
    from grader.spec import Status

    assert set(SAYS) == set(Status)
    tests = [_test(f"t_{status.value}", visibility, status.value, f"why {SECRET}")
             for status in Status for visibility in ("public", "hidden")]
    card = {"score": 0.0, "max_score": float(len(tests)),
            "components": {"attention": {"score": 0.0, "max_score": float(len(tests))}}, "tests": tests}
    for hidden in ("score", "name", "full"):
        for text in (markdown(Row("ada", Outcome.GRADED, card=card), hidden),
                     page(Row("ada", Outcome.GRADED, card=card), hidden)):
            assert all(SAYS[status] in text for status in Status)  # the public tests at least


def test_gradings_that_did_not_end_get_no_feedback_and_lms_students_an_upload_zip(tmp_path):
    """A timed-out row keeps its card in part (points so far): no feedback page, no grade; the pages of
    students from an LMS export go into lms_upload.zip under the names the LMS's bulk upload files."""
    import zipfile

    rows = [Row("lovelaceada_51", Outcome.GRADED, card=CARD),
            Row("Alan_Turing_1002", Outcome.UNREADABLE, "quiz.py is larger than the cap of 20 MiB"),
            Row("erin", Outcome.TIMED_OUT, "1 test(s) stalled", card=CARD)]
    handback = {"lovelaceada_51": "lovelaceada_51_9001_feedback.html",
                "Alan_Turing_1002": "Alan Turing_1002_assignsubmission_file_/feedback.html"}
    written = write_feedback(rows, tmp_path, handback=handback)
    assert sorted(p.name for p in written) == ["Alan_Turing_1002.html", "Alan_Turing_1002.md",
                                               "lms_upload.zip", "lovelaceada_51.html", "lovelaceada_51.md"]
    with zipfile.ZipFile(tmp_path / "lms_upload.zip") as upload:
        assert sorted(upload.namelist()) == sorted(handback.values())
        assert upload.read(handback["lovelaceada_51"]) == (tmp_path / "lovelaceada_51.html").read_bytes()
    assert "larger than the cap of 20 MiB" in (tmp_path / "Alan_Turing_1002.md").read_text()
