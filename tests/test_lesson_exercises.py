"""Lesson exercises: every registered exercise's stub fails with a message, a right answer found
by the simulator passes, malformed or raising answers become failed verdicts (never exceptions),
verdicts are plain JSON both ways (the grader's path), and the hint ladder grows per attempt."""
from __future__ import annotations

import json

import pytest

from gpumemlab.quizkit.exercise_cells import Exercises
from gpumemlab.lessons import all_exercises, judge, judge_json
from gpumemlab.units import MiB

# one right answer per exercise, checked by the judge itself (the simulator), not by this table
RIGHT = {
    "01.ex": ["2 MiB", "3 MiB", 4 * MiB],
    "02.ex": [1, 2, 3, 6],
    "04.ex": [2],
    "05.ex": "max_split_size_mb:512",
    "10.ex": "out.argmax(1).tolist()",
    "11.ex": [8, 4, 2, 1],
    "13.ex": 14,
}


def _largest_now():
    import gpumemlab as gml
    from gpumemlab.lessons.evidence import evidence_state
    gpu, _rec = evidence_state()
    return gml.fragmentation(gpu.snapshot())["largest_request_now_bytes"]


RIGHT["03.ex"] = _largest_now()


def _largest_06():
    # bisect on the simulator: the largest request that fits (to 512 B)
    from gpumemlab.lessons.expandable_segments import fragmented_06
    lo, hi = 0, 8 << 30
    while hi - lo > 512:
        mid = (lo + hi) // 1024 * 512
        lo, hi = (mid, hi) if fragmented_06("expandable_segments:True", request=mid)[2] \
            else (lo, mid)
    return lo


RIGHT["06.ex"] = _largest_06()


def _largest_batch_07():
    # bisect on replays of the recorded step, between a batch that fits and one that does not
    from gpumemlab.lessons.activations import exercise_card_07, fits_07
    card = exercise_card_07()
    lo, hi = 64, 128
    assert fits_07(lo, True, card) and not fits_07(hi, True, card)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits_07(mid, True, card) else (lo, mid)
    return lo


RIGHT["07.ex"] = _largest_batch_07


def _block_08():
    # the largest power of two whose waste, simulated, stays under the limit
    from gpumemlab.lessons.paged_kv_cache import WASTE_LIMIT_08, waste_08
    return max(b for b in (8, 16, 32, 64, 128) if waste_08(b) < WASTE_LIMIT_08)


RIGHT["08.ex"] = _block_08


def _smallest_card_09():
    # bisect the card size on replays of the recording (to 1 MiB)
    from gpumemlab.lessons.diagnose import fits_09
    lo, hi = 1 << 30, 4 << 30          # does not fit / fits
    assert not fits_09(lo) and fits_09(hi)
    while hi - lo > (1 << 20):
        mid = (lo + hi) // 2 // (1 << 20) * (1 << 20)
        lo, hi = (lo, mid) if fits_09(mid) else (mid, hi)
    return hi


RIGHT["09.ex"] = _smallest_card_09


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
    out = judge_json("05.ex", json.dumps("max_split_size_mb:512"))
    assert json.loads(json.dumps(out)) == out and out["passed"] is True
    assert out["figures"]["settings"] == 1
    assert judge_json("05.ex", "{not json")["passed"] is False
    two = judge("05.ex", "max_split_size_mb:512,expandable_segments:True")
    assert not two.passed and "2 settings" in two.message


def test_hint_ladder_and_raising_answers(ex, capsys):
    ex.check("05.ex", "")
    first = capsys.readouterr().out
    assert first.startswith("✗ 05.ex not yet: under the defaults ('') the second 6 GiB")
    assert "Hint 1/3" in first and "Hint 2/3" not in first
    ex.check("05.ex", lambda: 1 / 0)
    second = capsys.readouterr().out
    assert "your code raised ZeroDivisionError: division by zero" in second
    assert "Hint 2/3" in second
    ex.check("05.ex", "max_split_size_mb:10")
    assert "c10 would refuse 'max_split_size_mb:10'" in capsys.readouterr().out
    ex.check("05.ex", RIGHT["05.ex"])
    assert capsys.readouterr().out.startswith("✓ 05.ex solved")
    assert ex.progress().exercise("05.ex") == {"attempts": 4, "passed": True,
                                               "solved_at_attempt": 4}
    with pytest.raises(AssertionError, match="second 6 GiB"):
        ex.assert_passes("05.ex", "")
    ex.assert_passes("05.ex", RIGHT["05.ex"])
