"""Hints that teach, not tell: a text question's first hint does not name the answer (03.2's
"Look for keys starting with inactive_" left one counter, the answer), and a predict question's
hints state the rule that decides every variant it can draw (03.5's said a freed block is reused
when it is "big enough", which a third of its "no" variants contradict: the request goes to
another pool, or a smaller free block fits it better)."""
from __future__ import annotations

import random
import re

from gpumemlab.allocator.rounding import is_small, round_size
from gpumemlab.quizkit.answers import matches
from gpumemlab.quizkit.bank import load_bank
from gpumemlab.quizkit.compute import parse_op, run_ops
from gpumemlab.quizkit.generators import reuse


def _stat_metrics():
    from gpumemlab.devices.simulated import SimulatedGPU
    return sorted({key.split(".")[0] for key in SimulatedGPU("1GiB").memory_stats()})


def test_03_2_first_hint_does_not_spell_the_answers_name():
    q = load_bank("03").get("03.2")
    metrics = _stat_metrics()
    right = {m for m in metrics if matches(q.id, m, q.data["salt"], q.data["answer_hashes"])}
    assert right                                          # the answer is one of memory_stats()'s
    for hint in q.shown_hints(1)[:1]:
        named = {m for m in metrics for word in re.findall(r"[a-z][a-z_]{3,}", hint.lower())
                 if m.startswith(word.rstrip("_")) and word.rstrip("_") not in ("bytes",)}
        # the counters whose names the hint spells out (a prefix is enough): not the answer's
        assert not named & right, (hint, named)


def _rule_03_5(ops):
    """The allocator's rule, as the hints state it: c goes to the pool of its rounded size, on
    its stream; of the free blocks there (merged with their free neighbours) it takes the
    smallest that holds it, the lowest address on a tie; it starts where a was only if that block
    is a's."""
    before = run_ops(ops[:2])
    a_address = before.names["a"].address
    freed = run_ops(ops[:3])            # kept alive: its names hold b, and a tensor dropped frees
    state = freed.gpu.snapshot()
    _kind, _name, nbytes, stream = parse_op(ops[3])[:4]
    size = round_size(nbytes)
    fits = [(b["size"], b["address"]) for s in state["segments"] for b in s["blocks"]
            if b["state"] == "inactive" and s["stream"] == stream
            and (s["segment_type"] == "small") == is_small(size) and b["size"] >= size]
    return "yes" if fits and min(fits)[1] == a_address else "no"


def test_03_5_the_rule_in_its_hints_decides_every_variant():
    q = load_bank("03").get("03.5")
    hints = " ".join(q.shown_hints(99)).lower()
    assert "pool" in hints and "stream" in hints and "smallest" in hints and "merge" in hints
    assert "big enough" not in hints
    reasons = set()
    for seed in range(300):
        v = reuse(random.Random(f"{seed}:03.5"), {})
        assert _rule_03_5(v.ops) == v.answer(), v.ops
        reasons.add(v.answer())
    assert reasons == {"yes", "no"}
