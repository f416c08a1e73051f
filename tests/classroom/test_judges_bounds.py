"""Judges within their limits (issue 34): every judge returns a verdict for every answer, and
16.ex (the planner, run up to three times) is judged well inside its budget."""
import time

import pytest

from gpumemlab.lessons import judge


def test_01ex_answer_past_the_card_is_a_verdict_not_an_error():
    v = judge("01.ex", [16 * 2**30] * 3)
    assert not v.passed and "does not fit" in v.message and "16.00 GiB" in v.message
    # 01.ex: three sizes that fill one 20 MiB segment while adding up to at most 19.5 MiB
    assert judge("01.ex", ["9 MiB", "7 MiB", "3.25 MiB"]).passed


@pytest.mark.slow
def test_14ex_right_answer_is_judged_inside_its_budget_through_the_pool():
    from gpumemlab.classroom.judge_pool import SLOW_JUDGES, JudgePool

    pool = JudgePool()
    request = {"question": "16.ex", "name": "levers", "probes": None, "kind": "exercise"}
    try:
        start = time.monotonic()
        passed, message = pool.judge(request, {"ok": True, "value": {"precision": "bf16",
                                                                         "checkpoint": 2}},
                                     "seed")
        took = time.monotonic() - start
    finally:
        pool.close()
    assert passed, message
    assert took < SLOW_JUDGES["16.ex"]["wall_s"] / 2, took
