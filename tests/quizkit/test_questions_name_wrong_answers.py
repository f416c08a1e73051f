"""Every predict question names at least one wrong answer a learner is likely to give, with the
rule that accounts for it (``predict_rules.Misconception``), so a wrong guess hears why and not
only "not this time"; a choice question's wrong answer is one of its choices."""
from __future__ import annotations

import gpumemlab.lessons  # noqa: F401  (registers the lessons' questions)
from gpumemlab.quizkit.predict_rules import QUESTIONS

# Questions with no wrong answer named yet; strict: an entry goes once its question names one.
STILL_UNNAMED = {"03.p1", "03.p2", "05.p2", "07.p1", "07.p3", "07.p4", "09.p2", "12.p3", "15.p2",
                 "16.p2"}


def test_every_question_names_a_likely_wrong_answer():
    unnamed = {q for q, spec in QUESTIONS.items() if not spec.misconceptions}
    assert unnamed - STILL_UNNAMED == set(), "questions with no wrong answer named"
    assert STILL_UNNAMED - unnamed == set(), "named now: drop them from STILL_UNNAMED"


def test_a_choice_questions_wrong_answers_are_its_choices_with_a_rule():
    for q, spec in QUESTIONS.items():
        for m in spec.misconceptions:
            assert m.said().strip().endswith((".", ")")), (q, m.said())
            if spec.kind == "choice":
                assert m.wrong in spec.choices, (q, m.wrong)
