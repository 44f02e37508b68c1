"""quiz.py: one answer letter a-d for each of q1..q6."""
from solutions.quiz import ANSWERS


def test_answers_cover_exactly_q1_to_q6() -> None:
    assert set(ANSWERS) == {f"q{i}" for i in range(1, 7)}


def test_every_answer_is_one_letter_a_to_d() -> None:
    assert all(isinstance(a, str) and a in ("a", "b", "c", "d") for a in ANSWERS.values())
