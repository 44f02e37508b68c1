"""quiz.py, hidden: each question's answer against the reference's ANSWERS.

Messages name the question and its topic, never the right letter.
"""
from ...spec import Visibility
from .. import Suite
from ..checks import expect
from ..public.quiz import QUESTIONS, answers, letter
from .reference import ref

suite = Suite("quiz", Visibility.HIDDEN)


def _question_case(question: str, topic: str) -> None:
    def check(student):
        answer = letter(answers(student), question)
        expect(answer == ref.quiz.ANSWERS[question],
               f"({answer}) is not the right answer; reread that part of the lecture (and the course book's "
               "chapter on self-attention and the Transformer)")

    check.__name__ = f"quiz_{question}"
    check.__doc__ = f"{question}: {topic}"
    suite.case(0.75)(check)


for _question, _topic in QUESTIONS.items():
    _question_case(_question, _topic)
