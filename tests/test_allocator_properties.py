"""Property tests: random sequences of malloc / free / empty_cache / record_stream / settings
changes, with every invariant of the allocator checked after every operation
(gpumemlab.allocator.invariants), under several settings."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumemlab.allocator import (AllocatorConfig, DeviceCachingAllocator, OutOfMemoryError,
                                 check_invariants)

MiB = 1024 * 1024

SIZES = st.one_of(
    st.integers(1, 4096),  # tiny
    st.integers(4096, 1024 * 1024),  # small pool
    st.integers(1024 * 1024 + 1, 10 * MiB),  # 20 MiB segments
    st.integers(10 * MiB, 200 * MiB),  # rounded-to-2MiB segments, some oversize
)

OPS = st.lists(st.one_of(
    st.tuples(st.just("malloc"), SIZES, st.sampled_from([0, 0, 0, 1, 2])),
    st.tuples(st.just("free"), st.integers(0, 1000)),
    st.tuples(st.just("record_stream"), st.integers(0, 1000), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("empty_cache")),
    st.tuples(st.just("settings"), st.sampled_from([
        "", "expandable_segments:True", "expandable_segments:False", "max_split_size_mb:64",
        "roundup_power2_divisions:4", "garbage_collection_threshold:0.6",
        "roundup_power2_divisions:[64:8,>:2],max_split_size_mb:100"])),
    st.tuples(st.just("fraction"), st.sampled_from([0.5, 0.8, 1.0])),
), max_size=60)

CONFIGS = ["", "expandable_segments:True", "max_split_size_mb:40,garbage_collection_threshold:0.5",
           "roundup_power2_divisions:2"]


def run_ops(conf, ops, total=768 * MiB):
    alloc = DeviceCachingAllocator(total, config=AllocatorConfig.parse(conf), max_entries=500)
    live = []
    check_invariants(alloc)
    for op in ops:
        kind = op[0]
        if kind == "malloc":
            try:
                live.append(alloc.malloc(op[1], op[2]))
            except OutOfMemoryError:
                pass
        elif kind == "free" and live:
            alloc.free(live.pop(op[1] % len(live)))
        elif kind == "record_stream" and live:
            alloc.record_stream(live[op[1] % len(live)], op[2])
        elif kind == "empty_cache":
            alloc.empty_cache()
        elif kind == "settings":
            alloc.set_allocator_settings(op[1])
        elif kind == "fraction":
            alloc.set_memory_fraction(op[1])
        check_invariants(alloc)
        stats = alloc.stats
        assert stats.allocated_bytes[0].current <= stats.reserved_bytes[0].current <= total
    for block in live:
        alloc.free(block)
        check_invariants(alloc)
    alloc.empty_cache()
    check_invariants(alloc)
    # Everything freed and the cache emptied: nothing may stay reserved.
    assert alloc.stats.reserved_bytes[0].current == 0
    assert alloc.stats.active[0].current == 0
    return alloc


@pytest.mark.parametrize("conf", CONFIGS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_invariants_hold_after_every_operation(conf, ops):
    run_ops(conf, ops)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_deterministic(ops):
    """The same operations give the same snapshot, byte for byte."""
    a = run_ops("", ops)
    b = run_ops("", ops)
    assert a.snapshot() == b.snapshot()


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(SIZES, min_size=1, max_size=30))
def test_rounding_and_pools(sizes):
    alloc = DeviceCachingAllocator(16 * 1024 * MiB)
    for n in sizes:
        blk = alloc.malloc(n)
        assert blk.size >= n and blk.size % 512 == 0
        assert blk.pool.is_small == (blk.size <= MiB)
        assert blk.requested_size == n
    check_invariants(alloc)


def test_bad_settings_change_nothing():
    alloc = DeviceCachingAllocator(MiB * 100, config=AllocatorConfig.parse("max_split_size_mb:64"))
    before = alloc.config.settings_dict()
    with pytest.raises(ValueError):
        alloc.set_allocator_settings("expandable_segments:Yes")
    assert alloc.config.settings_dict() == before
