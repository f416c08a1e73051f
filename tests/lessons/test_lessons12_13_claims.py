"""Lessons 12 and 13 (once lesson 11): their feedback says what its numbers say (issue 35 item 5). 13.p2's rule and quiz 13.4's
options once said smallest first "climbs" at every capture, where the lesson's own figures are
22, 22, 46 and 118 MiB (no growth at batch 2): the rule now quotes the simulator's figures, and
the quiz's keyed option names the captures the simulator sees the pool grow at. Quiz 11's keyed
choices are checked on the simulator too, since no number in a bank is typed in."""
from __future__ import annotations

import re

from gpumemlab.quizkit.bank import load_bank
from gpumemlab.quizkit.checker import evaluate
from gpumemlab.units import MiB, format_size


def _keyed(qid):
    q = load_bank(qid[:2]).get(qid)
    letters = "abcdefgh"[:len(q.data["options"])]
    right = [k for k, letter in enumerate(letters) if evaluate(q, letter).correct]
    assert len(right) == 1
    return q, q.data["options"][right[0]]["text"]


def test_11_p4_rule_quotes_the_growth_it_computes():
    import gpumemlab.lessons  # noqa: F401  (registers the questions)
    from gpumemlab.lessons.pools_and_graphs import growth_13, reserved_13, steps_13
    from gpumemlab.quizkit.predict_rules import QUESTIONS, compare

    order = (1, 2, 4, 8)
    steps, grew = steps_13(order), growth_13(order)
    assert grew == [b for k, b in enumerate(order) if k and steps[k] > steps[k - 1]]
    assert 2 not in grew and steps[1] == steps[0]          # batch 2 adds nothing
    spec = QUESTIONS["13.p2"]
    got = compare(spec, reserved_13((8, 4, 2, 1)), reserved_13(order))   # the largest-first guess
    assert got.rule and got.rule in got.text
    assert ", ".join(format_size(r) for r in steps) in got.rule
    assert f"grows at batches {' and '.join(map(str, grew))}," in got.rule
    assert not re.search(r"each larger capture|every (larger )?capture", got.rule)


def test_quiz_11_7_keys_the_captures_the_pool_grows_at():
    from gpumemlab.lessons.pools_and_graphs import growth_13

    q, key = _keyed("13.4")
    order = tuple(int(b) for b in re.search(r"in the order ([\d, ]+)\.", q.prompt)[1].split(","))
    grew = growth_13(order)
    assert grew == [1, 8], grew
    named = re.match(r"After batches? ([\d and]+?);", key)[1]
    assert [int(b) for b in re.findall(r"\d+", named)] == grew
    # and the other options' claims are false for this order
    others = [o["text"] for o in q.data["options"] if o["text"] != key]
    assert any(o.startswith("After every capture") for o in others) and len(grew) < len(order)


def test_quiz_11_keyed_choices_agree_with_the_simulator():
    from gpumemlab.quizkit.compute import compute
    from gpumemlab.devices.simulated import SimulatedGPU
    from gpumemlab.lessons.pools_and_graphs import captured_step

    # 12.1: 12 MiB then two 6 MiB, or the other way: the same
    _q, key = _keyed("12.1")
    big, small = (compute({"ops": ops, "measure": "memory_reserved"}) for ops in (
        ["a = 12MiB", "b = 6MiB", "c = 6MiB"], ["a = 6MiB", "b = 6MiB", "c = 12MiB"]))
    assert big == small and key.startswith("Neither")
    # 13.2: a 50 MiB request beside a use_on_oom pool's free 40 MiB on a 64 MiB card fails
    _q, key = _keyed("13.2")
    ops = ["pool P use_on_oom", "in P: x = 40MiB", "del x", "y = 50MiB"]
    assert compute({"ops": ops, "measure": "oom", "total_memory": "64MiB"}) == 1
    assert compute({"ops": ops, "measure": "memory_reserved", "total_memory": "64MiB"}) == 40 * MiB
    assert key.startswith("Out of memory")
    # 13.3: reset A (shared with B) and C (own pool): only C's pool gives back, its free segments
    _q, key = _keyed("13.3")
    gpu = SimulatedGPU("8GiB", alloc_conf="")
    shared, outs = gpu.graph_pool_handle(), []
    graphs = [gpu.CUDAGraph() for _ in range(3)]
    for g, pool in zip(graphs, (shared, shared, None)):
        with gpu.graph(g, pool=pool):
            outs.append(captured_step(gpu, 4))
    own = graphs[2].pool()
    before = _reserved_by_pool(gpu)
    assert set(before) == {tuple(shared), tuple(own)}, before
    graphs[0].reset()
    graphs[2].reset()
    gpu.empty_cache()
    after = _reserved_by_pool(gpu)
    assert after[tuple(shared)] == before[tuple(shared)]
    assert 0 < after[tuple(own)] < before[tuple(own)]      # its output's segment stays
    assert key.startswith("Only C's pool")


def _reserved_by_pool(gpu) -> dict:
    out = {}
    for seg in gpu.memory_snapshot():
        pool = tuple(seg["segment_pool_id"])
        out[pool] = out.get(pool, 0) + seg["total_size"]
    return out


def test_largest_first_reaches_the_least_for_both_steps():
    # the take-away says so of the lesson's step and of the exercise's second model
    from itertools import permutations
    from gpumemlab.lessons.pools_and_graphs import (BATCHES_13, _second_model_reserved,
                                                    reserved_13)
    for reserved in (reserved_13, _second_model_reserved):
        assert reserved(BATCHES_13) == min(reserved(o) for o in permutations(BATCHES_13))
