"""Lesson exercises: every registered exercise's stub fails with a message, a right answer found
by the simulator passes, malformed or raising answers become failed verdicts (never exceptions),
verdicts are plain JSON both ways (the grader's path), and the hint ladder grows per attempt."""
from __future__ import annotations

import json

import pytest

from gpumemlab.quizkit.exercise_cells import Exercises
from gpumemlab.lessons import all_exercises, judge, judge_json

from lesson_answers import RIGHT   # one right answer per exercise, found by the simulator


@pytest.fixture
def ex(tmp_path):
    return Exercises(tmp_path / "progress.json")


@pytest.mark.parametrize("exercise", all_exercises(), ids=lambda e: e.id)
def test_the_stub_fails_clearly_and_a_right_answer_passes(exercise):
    stub = judge(exercise.id, exercise.stub)
    assert not stub.passed and stub.message
    assert exercise.hints and exercise.task and exercise.expects
    assert exercise.id in RIGHT, f"add a right answer for {exercise.id} to RIGHT"
    right = RIGHT[exercise.id]
    assert judge(exercise.id, right() if callable(right) else right).passed


@pytest.mark.parametrize("exercise", all_exercises(), ids=lambda e: e.id)
@pytest.mark.parametrize("bad", [object(), {"x": {1, 2}}, [None] * 3, "no:such", -5, 1e300])
def test_malformed_answers_are_failed_verdicts(exercise, bad):
    verdict = judge(exercise.id, bad)
    assert verdict.passed is False and verdict.message


def test_the_grader_path_is_plain_json():
    right = RIGHT["05.ex"]()
    out = judge_json("05.ex", json.dumps(right))
    assert json.loads(json.dumps(out)) == out and out["passed"] is True
    assert f"max_split_size_mb:{out['figures']['max_split_size_mb']}" == right
    assert out["figures"]["next_fits"] is False
    assert judge_json("05.ex", "{not json")["passed"] is False
    two = judge("05.ex", right + ",expandable_segments:True")
    assert not two.passed and "one max_split_size_mb:N setting" in two.message


@pytest.mark.parametrize("exercise", all_exercises(), ids=lambda e: e.id)
def test_checking_the_shipped_stub_records_nothing_and_shows_no_hint(exercise, ex, capsys):
    ex.check(exercise.id, exercise.stub)
    out = capsys.readouterr().out
    assert out.startswith(f"· {exercise.id} not tried yet") and "Hint" not in out
    assert ex.progress().exercise(exercise.id) == {"attempts": 0, "passed": False}
    assert "exercises" not in ex.progress().data


def test_hint_ladder_and_raising_answers(ex, capsys):
    ex.check("05.ex", "")                     # the stub: no attempt yet
    capsys.readouterr()
    ex.check("05.ex", "max_split_size_mb:512")
    first = capsys.readouterr().out
    assert first.startswith("✗ 05.ex not yet: it fits under 'max_split_size_mb:512', and under "
                            "max_split_size_mb:513 too")
    assert "Hint 1/3" in first and "Hint 2/3" not in first
    ex.check("05.ex", lambda: 1 / 0)
    second = capsys.readouterr().out
    assert "your code raised ZeroDivisionError: division by zero" in second
    assert "Hint 2/3" in second
    ex.check("05.ex", "max_split_size_mb:10")
    assert "c10 would refuse 'max_split_size_mb:10'" in capsys.readouterr().out
    ex.check("05.ex", RIGHT["05.ex"]())
    assert capsys.readouterr().out.startswith("✓ 05.ex solved")
    assert ex.progress().exercise("05.ex") == {"attempts": 4, "passed": True,
                                               "solved_at_attempt": 4}
    with pytest.raises(AssertionError, match="second 6 GiB tensor fails"):
        ex.assert_passes("05.ex", "max_split_size_mb:8000")
    ex.assert_passes("05.ex", RIGHT["05.ex"]())


def test_15_feedback_names_the_mistake_and_the_hints_name_no_answer():
    """15.ex: a threshold at or above the activation hears that the activation is rounded (and
    to what, against the host); one below the answer hears that a larger one fits; no hint
    states the answer's number."""
    import re

    from gpumemlab.lessons.memory_beyond_the_gpu import EX_STEP_15
    from gpumemlab.quizkit.exercise_base import REGISTRY

    ex = REGISTRY["15.ex"]
    right = RIGHT["15.ex"]()       # found by the simulator (tests/lesson_answers.py)
    assert right == EX_STEP_15["act_bytes"] // (1 << 20)      # the largest whole MiB below it
    over = judge("15.ex", right + 1)
    assert not over.passed and "is at most" in over.message and "rounded up to" in over.message
    under = judge("15.ex", right - 10)
    assert not under.passed and "is not the largest" in under.message
    for hint in ex.hints:
        assert str(right) not in re.findall(r"\d+", hint), hint
