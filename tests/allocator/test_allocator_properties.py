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


def apply_block_op(alloc, op, live) -> bool:
    """Carry out a malloc, free, record_stream or empty_cache op on ``alloc`` (``live`` holds the
    blocks in use); False for any other kind of op, which the caller handles."""
    kind = op[0]
    if kind == "malloc":
        try:
            live.append(alloc.malloc(op[1], op[2]))
        except OutOfMemoryError:
            pass  # an OOM is an allowed outcome; the invariants must still hold
    elif kind == "free":
        if live:
            alloc.free(live.pop(op[1] % len(live)))
    elif kind == "record_stream":
        if live:
            alloc.record_stream(live[op[1] % len(live)], op[2])
    elif kind == "empty_cache":
        alloc.empty_cache()
    else:
        return False
    return True


def run_ops(conf, ops, total=768 * MiB):
    alloc = DeviceCachingAllocator(total, config=AllocatorConfig.parse(conf), max_entries=500)
    live = []
    check_invariants(alloc)
    for op in ops:
        kind = op[0]
        if apply_block_op(alloc, op, live):
            pass
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


# ----------------------------------------------------------------------------- private pools

_MALLOC = st.tuples(st.just("malloc"), SIZES, st.sampled_from([0, 0, 1, 5]))
_FREE = st.tuples(st.just("free"), st.integers(0, 1000))
_ENTER = st.tuples(st.just("enter_pool"), st.integers(0, 100))
POOL_OPS = st.lists(st.one_of(
    _MALLOC, _MALLOC, _MALLOC, _FREE, _FREE, _ENTER, _ENTER,
    st.tuples(st.just("record_stream"), st.integers(0, 1000), st.sampled_from([1, 2, 5])),
    st.tuples(st.just("empty_cache")),
    st.tuples(st.just("new_pool"), st.booleans(), st.booleans()),
    st.tuples(st.just("del_pool"), st.integers(0, 100)),
    st.tuples(st.just("leave_pool")),
    st.tuples(st.just("begin_capture"), st.integers(0, 100), st.booleans()),
    st.tuples(st.just("end_capture")),
    st.tuples(st.just("reset_graph"), st.integers(0, 100)),
    st.tuples(st.just("fraction"), st.sampled_from([0.3, 0.3, 1.0])),
), max_size=60)
# Every run starts with a use_on_oom pool and a no_split pool, so that the random part exercises
# routing, the OOM fallback and no_split from the first operation on.
POOL_PREFIX = [("new_pool", True, False), ("new_pool", False, True), ("enter_pool", 0)]


def run_pool_ops(conf, ops, total=512 * MiB, prefix=POOL_PREFIX):
    """MemPool / use_mem_pool / graph capture on the allocator, as the facade drives it; the
    invariant checker (pools included) runs after every operation."""
    from gpumemlab.allocator.private_pool import PoolError
    alloc = DeviceCachingAllocator(total, config=AllocatorConfig.parse(conf), max_entries=500)
    live, pools, entered, graphs = [], [], [], []
    capture = None  # (pool id, stream) of the capture underway
    next_id = [1, 1]
    for op in list(prefix) + list(ops):
        kind = op[0]
        if apply_block_op(alloc, op, live):
            pass
        elif kind == "new_pool":
            pid = (0, next_id[1])
            next_id[1] += 1
            alloc.create_or_incref_pool(pid)
            if op[1]:
                alloc.set_use_on_oom(pid, True)
            if op[2]:
                alloc.set_no_split(pid)
            pools.append(pid)
        elif kind == "del_pool" and pools:
            pid = pools.pop(op[1] % len(pools))
            alloc.set_use_on_oom(pid, False)
            alloc.release_pool(pid)
            alloc.empty_cache(None, pid)
        elif kind == "enter_pool" and pools:
            pid = pools[op[1] % len(pools)]
            try:
                alloc.begin_allocate_to_pool(pid, lambda stream: True)
                entered.append(pid)
            except PoolError:  # already entered: c10 refuses, nothing changed
                pass
        elif kind == "leave_pool" and entered:
            pid = entered.pop()
            alloc.end_allocate_to_pool(pid)
            alloc.release_pool(pid)
        elif kind == "begin_capture" and capture is None:
            if op[2] and pools:
                pid = pools[op[1] % len(pools)]
            else:
                pid = (next_id[0], 0)
                next_id[0] += 1
            try:
                alloc.begin_allocate_to_pool(pid, lambda stream: stream == 5)
            except PoolError:
                pass
            else:
                alloc.notify_capture_begin()
                capture = pid
        elif kind == "end_capture" and capture is not None:
            alloc.notify_capture_end()
            alloc.end_allocate_to_pool(capture)
            graphs.append(capture)
            capture = None
        elif kind == "reset_graph" and graphs:
            alloc.release_pool(graphs.pop(op[1] % len(graphs)))
        elif kind == "fraction":
            alloc.set_memory_fraction(op[1])
        check_invariants(alloc)
    if capture is not None:
        alloc.notify_capture_end()
        alloc.end_allocate_to_pool(capture)
        graphs.append(capture)
    while entered:
        pid = entered.pop()
        alloc.end_allocate_to_pool(pid)
        alloc.release_pool(pid)
    for pid in graphs:
        alloc.release_pool(pid)
    for pid in pools:
        alloc.set_use_on_oom(pid, False)
        alloc.release_pool(pid)
        alloc.empty_cache(None, pid)
    check_invariants(alloc)
    for block in live:
        alloc.free(block)
        check_invariants(alloc)
    alloc.empty_cache()
    check_invariants(alloc)
    # Every pool released and every block freed: nothing reserved, no pool remembered.
    assert alloc.stats.reserved_bytes[0].current == 0
    assert alloc.graph_pools == {} and alloc.graph_pools_freeable == {}
    return alloc


# A card limited to 30 % (154 MiB) and nearly full, while the use_on_oom pool holds 70 MiB of
# cached blocks: default-pool requests that cudaMalloc cannot serve take the fallback path.
LIMITED_PREFIX = POOL_PREFIX + [("malloc", 40 * MiB, 0), ("malloc", 30 * MiB, 0), ("free", 0),
                                ("free", 0), ("leave_pool",), ("fraction", 0.3),
                                ("malloc", 80 * MiB, 0)]


@pytest.mark.parametrize("prefix", [POOL_PREFIX, LIMITED_PREFIX], ids=["card", "limited"])
@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "max_split_size_mb:40"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=POOL_OPS)
def test_pool_invariants_hold_after_every_operation(conf, prefix, ops):
    run_pool_ops(conf, ops, prefix=prefix)


@settings(max_examples=30, deadline=None)
@given(ops=POOL_OPS)
def test_pools_deterministic(ops):
    assert run_pool_ops("", ops).snapshot() == run_pool_ops("", ops).snapshot()
