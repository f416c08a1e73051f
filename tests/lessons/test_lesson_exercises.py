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
    ex.check("05.ex", "max_split_size_mb:10")    # a setting c10 refuses: a wrong shape
    refused = capsys.readouterr().out
    assert refused.startswith("· 05.ex not counted: c10 would refuse 'max_split_size_mb:10'")
    assert "Hint" not in refused
    ex.check("05.ex", RIGHT["05.ex"]())
    assert capsys.readouterr().out.startswith("✓ 05.ex solved")
    assert ex.progress().exercise("05.ex") == {"attempts": 3, "passed": True,
                                               "solved_at_attempt": 3}
    with pytest.raises(AssertionError, match="second 6 GiB tensor fails"):
        ex.assert_passes("05.ex", "max_split_size_mb:8000")
    ex.assert_passes("05.ex", RIGHT["05.ex"]())


@pytest.mark.parametrize("ex_id", ["05.ex", "13.ex", "17.ex"])
def test_rerunning_the_cell_after_solving_says_solved_twice(ex_id, ex, capsys):
    """The exercise cell run again after solving (the stub back in place, say a fresh kernel):
    the header and the stub's line say the same thing. Before: "(solved)" above "· not tried
    yet"."""
    from gpumemlab.quizkit.lesson_exercises import get

    right = RIGHT[ex_id]
    ex.check(ex_id, right() if callable(right) else right)
    capsys.readouterr()
    ex(ex_id)
    ex.check(ex_id, get(ex_id).stub)
    header, *rest = capsys.readouterr().out.splitlines()
    assert header.endswith("(solved)")
    assert rest[-1].startswith(f"· {ex_id} solved: the answer here is the stub"), rest[-1]
    assert "not tried" not in "\n".join(rest)
    assert ex.progress().exercise(ex_id)["attempts"] == 1


def test_the_stub_line_counts_the_attempts_so_far(ex, capsys):
    ex.check("17.ex", [0])
    capsys.readouterr()
    ex.check("17.ex", [])
    assert capsys.readouterr().out.startswith("· 17.ex 1 attempt so far: the answer here is")


@pytest.mark.parametrize("ex_id, bad", [("13.ex", ["4,1,2,8"]), ("13.ex", [[8, 4, 2]]),
                                        ("17.ex", "45 MB"), ("17.ex", 45.5), ("17.ex", "many")])
def test_a_wrong_shape_is_not_counted_and_shows_no_hint(ex_id, bad, ex, capsys):
    """As for the quizzes (docs/QUIZZES.md): one line saying the shape, no attempt, no hint.
    Before: counted (attempts 1) with Hint 1/3."""
    ex.check(ex_id, bad)
    out = capsys.readouterr().out
    assert out.startswith(f"· {ex_id} not counted: ") and out.count("\n") == 1, out
    assert "Hint" not in out and "Expected" in out
    assert ex.progress().exercise(ex_id) == {"attempts": 0, "passed": False}
    assert judge(ex_id, bad).counted is False


def test_a_whole_mib_is_taken_in_any_plain_form():
    """"a whole number of MiB" (whole_mib_answer, once 17.ex's parser): 45, 45.0, "45" and
    "45 MiB" are one answer; 45.5 and "45 MB" are none. Before: only the int passed."""
    from gpumemlab.quizkit.exercise_base import AnswerShapeError, whole_mib_answer
    for form in (45, 45.0, "45", "45 MiB", "45MiB", "45M"):
        assert whole_mib_answer(form) == 45, form
    for bad in (45.5, "45 MB", "many", True):
        with pytest.raises(AnswerShapeError):
            whole_mib_answer(bad)


def test_no_wrong_answer_message_says_not_yet_twice(ex, capsys):
    """The cell prefixes "not yet:" itself; a judge's message must not. Before: 13.ex printed
    "✗ 13.ex not yet: not yet: the 1 order(s) listed ..."."""
    ex.check("13.ex", [[8, 4, 2, 1]])
    out = capsys.readouterr().out
    assert out.startswith("✗ 13.ex not yet: the 1 order(s) listed"), out
    for exercise in all_exercises():
        assert not judge(exercise.id, exercise.stub).message.lower().startswith("not yet")
