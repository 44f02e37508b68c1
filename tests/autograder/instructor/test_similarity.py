"""grade-all --similarity's comparison (grader/similarity.py): copies are flagged, the stubs handed
out are not (they are boilerplate), nor is a file written apart; the HTML report is written, and
summary.md lists the flagged pairs of students."""
import shutil

from grader.instructor.gradebook import summary
from grader.instructor.runner import payload
from grader.instructor.similarity import compare
from helpers import EXAMPLES, ROOT


def test_copies_are_flagged_and_the_stubs_are_not(tmp_path):
    shutil.copytree(EXAMPLES / "correct", tmp_path / "alice")
    shutil.copytree(EXAMPLES / "correct", tmp_path / "bob")
    text = (tmp_path / "bob" / "attention.py").read_text()
    renamed = text.replace("scores", "logits").replace("weights", "probs")
    (tmp_path / "bob" / "attention.py").write_text(renamed)
    payloads = {name: payload(tmp_path / name) for name in ("alice", "bob")}
    payloads["carol"] = payload(ROOT / "exercises")  # the untouched stubs
    pairs = compare(payloads, tmp_path / "similarity.html")
    flagged = {(pair.file, pair.first, pair.second) for pair in pairs}
    assert ("attention.py", "alice", "bob") in flagged  # renamed variables still match
    assert ("model.py", "alice", "bob") in flagged
    assert not any("carol" in (pair.first, pair.second) for pair in pairs)
    assert not any(pair.file == "quiz.py" for pair in pairs)  # the right answers are the same for everyone
    assert not any(pair.first == "(reference solutions)" for pair in pairs)  # correct/ was written apart
    report = (tmp_path / "similarity.html").read_text()
    assert "alice/attention.py" in report
    assert "| alice | bob | 7 | 100% | analysis.py, attention.py, block.py," in summary([], "test", pairs)
