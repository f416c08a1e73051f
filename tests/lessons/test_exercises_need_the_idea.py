"""Exercises that need the lesson's idea (issue 35 item 4): the answers a learner gives without it
fail, here for 01.ex, whose task once accepted three copies of the size the lesson had just shown."""
from gpumemlab.lessons import judge_json
from gpumemlab.units import MiB
import json


def _passed(answer):
    return judge_json("01.ex", json.dumps(answer))["passed"]


def test_01_ex_needs_should_split_not_the_lessons_own_size():
    assert not _passed([MiB + 1] * 3)                    # one segment, but 16.99 MiB of it free
    assert not _passed([8 * MiB, 8 * MiB, 4 * MiB])      # fills it, but adds up to 20 MiB
    assert not _passed([10 * MiB, 5 * MiB, 4 * MiB])     # 10 MiB gets a segment of its own
    assert _passed([9 * MiB, 7 * MiB, 3 * MiB + MiB // 4])   # a 0.75 MiB remainder is not split off
