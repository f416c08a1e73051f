"""``SortedKeys`` (the free-block pool's ordered set) against a plain sorted list: every operation
sequence gives the same contents and the same answers to ceiling/higher/lower/contains, and the
runs stay sorted and sized (small LOAD values force splits and joins)."""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumemlab.allocator import sorted_keys
from gpumemlab.allocator.block import size_key
from gpumemlab.allocator.sorted_keys import SortedKeys

ops = st.lists(st.tuples(st.sampled_from(["add", "remove", "query"]),
                         st.integers(min_value=0, max_value=300)), max_size=400)


def _reference_answers(ref, key):
    i = bisect_left(ref, key)
    ceiling = ref[i] if i < len(ref) else None
    j = bisect_right(ref, key)
    higher = ref[j] if j < len(ref) else None
    lower = ref[i - 1] if i else None
    return ceiling, higher, lower, key in ref


@settings(max_examples=300, deadline=None)
@given(load=st.sampled_from([2, 4, 8, 16, 500]), sequence=ops)
def test_matches_a_plain_sorted_list(load, sequence):
    saved = sorted_keys.LOAD
    sorted_keys.LOAD = load
    try:
        keys, ref = SortedKeys(), []
        for op, key in sequence:
            if op == "add" and key not in ref:
                keys.add(key)
                insort(ref, key)
            elif op == "remove":
                if key in ref:
                    keys.remove(key)
                    ref.remove(key)
                else:
                    with pytest.raises(KeyError):
                        keys.remove(key)
            got = (keys.ceiling(key), keys.higher(key), keys.lower(key), key in keys)
            assert got == _reference_answers(ref, key)
            keys.check()
            assert len(keys) == len(ref)
        assert list(keys) == ref
    finally:
        sorted_keys.LOAD = saved


def test_size_key_orders_like_the_tuple():
    triples = [(s, z, p) for s in (0, 1, 7) for z in (512, 2**20, 2**63) for p in (0, 2**47, 2**64 - 1)]
    assert sorted(triples) == sorted(triples, key=lambda t: size_key(*t))
    assert sorted(triples, key=lambda t: size_key(*t)) == [
        t for _, t in sorted((size_key(*t), t) for t in triples)]


def test_a_million_keys_stay_in_short_runs():
    keys = SortedKeys()
    for k in range(0, 2_000_000, 2):
        keys.add((k * 7919) % 2_000_003)
    keys.check()
    assert len(keys) == 1_000_000
    assert max(len(run) for run in keys._runs) <= 2 * sorted_keys.LOAD
