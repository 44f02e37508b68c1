"""quiz.py, public: ANSWERS answers every question of the module quiz with one letter.

Messages name the question and its topic, never the right letter.
"""
from ...sandbox.errors import StudentError
from ...spec import Visibility
from ...student import Student
from .. import Suite
from ..checks import Failed, expect

suite = Suite("quiz", Visibility.PUBLIC)
QUESTIONS = {
    "q1": "the computational complexity of self-attention",
    "q2": "why the scores are scaled by sqrt(d_k)",
    "q3": "the role of the feed-forward network (the librarian analogy)",
    "q4": "how sinusoidal encodings express relative position",
    "q5": "why the sinusoidal frequencies are geometric",
    "q6": "why attention uses several heads",
}
LETTERS = ("a", "b", "c", "d")


def answers(student: Student) -> dict:
    """The submission's ANSWERS dict (read through its .copy(), the worker only calls things)."""
    try:
        value = student.call("quiz.ANSWERS.copy")
    except StudentError as error:
        if error.type_name in ("AttributeError", "TypeError"):
            raise Failed("quiz.py should define ANSWERS = {\"q1\": \"a\", ..., \"q6\": \"d\"}, a dict "
                         f"(reading it failed: {error.message})") from None
        raise
    expect(isinstance(value, dict), f"quiz.ANSWERS should be a dict, got {type(value).__name__}")
    return value


def _not_answered(questions: list[str]) -> StudentError:
    """Unanswered questions read as "not attempted", like a stub's NotImplementedError."""
    return StudentError("NotImplementedError",
                        f"{', '.join(questions)} not answered yet (None in quiz.ANSWERS)")


def letter(submitted: dict, question: str) -> str:
    """The answer to `question`, one lower-case letter; "not attempted" when it is None."""
    value = submitted.get(question)
    if value is None:
        raise _not_answered([question])
    expect(isinstance(value, str) and value.strip().lower() in LETTERS,
           f"quiz.ANSWERS[{question!r}] is {value!r}: answer with one letter 'a'-'d' (the options in the "
           "order the quiz lists them)")
    return value.strip().lower()


@suite.case(0.5)
def quiz_answers_format(student):
    """quiz.ANSWERS answers every question q1..q6 with one letter 'a'-'d'"""
    submitted = answers(student)
    missing = [q for q in QUESTIONS if q not in submitted]
    expect(not missing, f"quiz.ANSWERS has no {', '.join(missing)}: it needs one entry for each of q1..q6")
    unanswered = [q for q in QUESTIONS if submitted[q] is None]
    if len(unanswered) == len(QUESTIONS):
        raise _not_answered(unanswered)
    expect(not unanswered, f"{', '.join(unanswered)} not answered yet (None in quiz.ANSWERS)")
    for question in QUESTIONS:
        letter(submitted, question)
