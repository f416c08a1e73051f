"""A lesson's quiz asks what its lesson did not print (issue 35): quiz 11 once asked, word for
word, the lesson's own experiments (4 + 4 + 12 MiB, eight 1 MiB tensors then 1 MiB + 1 B, a pool's
40 MiB beside 40 MiB outside), whose reserved memory the lesson had just printed. Now no numeric
question's answer is a size the executed lesson prints (the outputs of its experiments, not a
predict cell's question or the quiz's own prompts). The lessons checked so far are listed; each costs a run of its lesson,
shared with the spoiler test."""
from __future__ import annotations

import re

import pytest

from lesson_runs import executed
from tests.notebooks.test_lessons_give_nothing_away import outputs_text, states_size

# Lessons whose quiz was reviewed for this; add one once it passes.
CHECKED = ("12", "13")


def _numeric_answers(key):
    from gpumemlab.quizkit.bank import UNITS, load_bank
    from gpumemlab.quizkit.checker import expected_in_unit

    for q in load_bank(key).questions:
        if q.kind == "numeric" and q.data["unit"] in ("bytes", "KiB", "MiB", "GiB"):
            unit = q.data["unit"]
            yield q.id, round(expected_in_unit(q.data["compute"], unit) * UNITS[unit])


@pytest.mark.parametrize("key", CHECKED)
def test_no_numeric_quiz_answer_is_printed_by_its_lesson(key, tmp_path_factory):
    cells, _, _ = executed(key, tmp_path_factory)
    # what its experiments printed: not a predict cell's question nor the quiz's own prompts
    printed = [(i, outputs_text(c)) for i, c in enumerate(cells) if c.cell_type == "code"
               and not re.search(r"gml\.(predict|quiz)\(", c.source)]
    answers = list(_numeric_answers(key))
    assert answers, f"quiz {key} has no numeric size question to check"
    found = [f"{qid} (answer {value:,} B): cell {i} prints {shown!r}"
             for qid, value in answers for i, text in printed
             for shown in [states_size(text, value)] if shown]
    assert not found, "\n".join(found)
