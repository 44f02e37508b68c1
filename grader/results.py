"""What one test produced: the data the judge hands to scoring and the reports."""
import re
from dataclasses import dataclass

from .spec import Status, Visibility

MESSAGE_CHARS = 2000
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f"
                     "\ufeff\ufff9-\ufffb]")
"""Control characters (terminal escapes start with \\x1b), C1 controls, zero-width and
bidirectional marks: what could rewrite a terminal or hide text. Newline and tab stay."""


class Failed(AssertionError):
    """A property the submission did not have; the message is shown to the student."""


def safe_text(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` made safe for a terminal, JSON and Markdown: valid UTF-8 (a lone surrogate becomes
    "?"), every unsafe character written as its escape (\\x1b), at most `limit` characters."""
    text = str(text).encode("utf-8", "replace").decode("utf-8")
    text = _UNSAFE.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!~-])")
"""Markdown's punctuation ("|" aside: a table escapes its cells' own)."""
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_text(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` made safe (safe_text) and inert in Markdown: no markup, link, image or HTML tag of the
    student's renders; it reads as it was written."""
    text = _MARKDOWN.sub(r"\\\1", safe_text(text, limit))
    return "".join(_HTML.get(char, char) for char in text)


@dataclass
class Result:
    name: str
    component: str
    score: float
    max_score: float
    status: Status
    message: str
    visibility: Visibility

    def __post_init__(self) -> None:
        self.message = safe_text(self.message)  # it may quote the student's output

    def to_json(self) -> dict:
        return {**vars(self), "status": self.status.value, "visibility": self.visibility.value}
