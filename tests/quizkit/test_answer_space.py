"""Variant questions worth their name: over 1,000 seeds, the numeric generators' answers are
right blind (the commonest answer) or copied (a classmate's) at most 1 time in 10; the
guessable ones (yes/no, a segment count) are measured as such, and assign says so."""
import pytest

from gpumemlab.quizkit import quiz
from gpumemlab.quizkit.answer_space import GUESS_BOUND, answer_space


def question_by_id(qid):
    return quiz.question_obj(qid)


@pytest.mark.parametrize("qid", ["01.7", "02.5"])
def test_size_questions_are_right_blind_or_copied_at_most_one_time_in_ten(qid):
    space = answer_space(question_by_id(qid))
    assert space.blind <= GUESS_BOUND and space.copied <= GUESS_BOUND, space
    assert space.distinct >= 40 and space.guess_proof


@pytest.mark.parametrize("qid", ["01.8", "02.4", "03.5"])
def test_counts_and_yes_no_questions_are_measured_guessable(qid):
    space = answer_space(question_by_id(qid))
    assert not space.guess_proof and space.blind > GUESS_BOUND, space
    line = space.line(qid)
    assert f"variant {qid}" in line and "\n" not in line and f"{space.commonest!r}" in line
