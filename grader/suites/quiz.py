"""quiz.py: ANSWERS, one letter per question of the module quiz (5 points).

The public test checks the form of every answer; each question's hidden test checks it against
the reference's ANSWERS. Messages name the question and its topic, never the right letter.
"""
from ..reference import ref
from ..sandbox.client import StudentError
from . import Suite
from .checks import Failed, expect

suite = Suite("quiz")
QUESTIONS = {
    "q1": "the computational complexity of self-attention",
    "q2": "why the scores are scaled by sqrt(d_k)",
    "q3": "the role of the feed-forward network (the librarian analogy)",
    "q4": "how sinusoidal encodings express relative position",
    "q5": "why the sinusoidal frequencies are geometric",
    "q6": "why attention uses several heads",
}
LETTERS = ("a", "b", "c", "d")


def _answers(student) -> dict:
    """The submission's ANSWERS dict (read through its .copy(), the worker only calls things)."""
    try:
        answers = student.call("quiz.ANSWERS.copy")
    except StudentError as error:
        if error.type_name in ("AttributeError", "TypeError"):
            raise Failed("quiz.py should define ANSWERS = {\"q1\": \"a\", ..., \"q6\": \"d\"}, a dict "
                         f"(reading it failed: {error.message})") from None
        raise
    expect(isinstance(answers, dict), f"quiz.ANSWERS should be a dict, got {type(answers).__name__}")
    return answers


def _not_answered(questions: list[str]) -> StudentError:
    """Unanswered questions read as "not attempted", like a stub's NotImplementedError."""
    return StudentError("NotImplementedError", f"{', '.join(questions)} not answered yet (None in quiz.ANSWERS)")


def _letter(answers: dict, question: str) -> str:
    value = answers.get(question)
    if value is None:
        raise _not_answered([question])
    expect(isinstance(value, str) and value.strip().lower() in LETTERS,
           f"quiz.ANSWERS[{question!r}] is {value!r}: answer with one letter 'a'-'d' (the options in the order "
           f"the quiz lists them)")
    return value.strip().lower()


@suite.case(0.5, public=True)
def quiz_answers_format(student):
    """quiz.ANSWERS answers every question q1..q6 with one letter 'a'-'d'"""
    answers = _answers(student)
    missing = [q for q in QUESTIONS if q not in answers]
    expect(not missing, f"quiz.ANSWERS has no {', '.join(missing)}: it needs one entry for each of q1..q6")
    unanswered = [q for q in QUESTIONS if answers[q] is None]
    if len(unanswered) == len(QUESTIONS):
        raise _not_answered(unanswered)
    expect(not unanswered, f"{', '.join(unanswered)} not answered yet (None in quiz.ANSWERS)")
    for question in QUESTIONS:
        _letter(answers, question)


def _question_case(question: str, topic: str) -> None:
    def check(student):
        answer = _letter(_answers(student), question)
        expect(answer == ref.quiz.ANSWERS[question],
               f"({answer}) is not the right answer; reread that part of the lecture (and the course book's "
               "chapter on self-attention and the Transformer)")

    check.__name__ = f"quiz_{question}"
    check.__doc__ = f"{question}: {topic}"
    suite.case(0.75)(check)


for _question, _topic in QUESTIONS.items():
    _question_case(_question, _topic)
