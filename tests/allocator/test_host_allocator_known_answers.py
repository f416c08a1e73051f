"""Known answers of the pinned host allocator model (gpumemlab/allocator/host/), each derived
from torch 2.13's aten/src/ATen/core/CachingHostAllocator.h (HOST_PYTORCH_REF)."""
import inspect
import re

import pytest

from gpumemlab.allocator import AllocatorConfig
from gpumemlab.allocator.constants import K_MB, SIZE_MAX
from gpumemlab.allocator.host import (CachingHostAllocator, HostOutOfMemoryError, explain_host_oom,
                                      host_stat_keys, pinned_bytes, size_index)

GiB = 1 << 30
REQUEST_20_4_GIB = int(20.4 * GiB)  # the 20.4 GiB buffer of sglang#36562


def config(env=""):
    return AllocatorConfig.parse(env)


def test_20_4_gib_pins_32_gib_under_default_rounding():
    """allocate(): roundSize = PowerOf2Ceil(size) when size <= pinned_max_round_threshold and
    size <= pinned_max_cached_size; both default to SIZE_MAX, so 20.4 GiB (between 2**34 and
    2**35) pins 2**35 bytes = 32 GiB."""
    assert 2**34 < REQUEST_20_4_GIB < 2**35
    assert pinned_bytes(REQUEST_20_4_GIB) == 32 * GiB
    a = CachingHostAllocator()
    block = a.allocate(REQUEST_20_4_GIB)
    assert block.size == 32 * GiB
    assert a.host_memory_stats()["allocated_bytes.current"] == 32 * GiB


def test_round_threshold_pins_what_the_rule_gives():
    """parsePinnedMaxRoundThreshold (torch 2.13 libc10, disassembled): the MiB value is clamped
    to SIZE_MAX >> 20 and shifted left by 20, so pinned_max_round_threshold_mb:1 means 1048576
    bytes. allocate() rounds only ``size <= threshold``: 20.4 GiB > 1 MiB is pinned at exactly
    its size; 614400 bytes (600 KiB) <= 1 MiB still rounds to 1048576; a size equal to the
    threshold is rounded (<=, and it is already a power of two: it stays)."""
    c = config("pinned_max_round_threshold_mb:1")
    assert c.pinned_max_round_threshold == K_MB
    assert pinned_bytes(REQUEST_20_4_GIB, c) == REQUEST_20_4_GIB
    assert pinned_bytes(600 * 1024, c) == K_MB
    assert pinned_bytes(K_MB, c) == K_MB
    assert pinned_bytes(K_MB + 1, c) == K_MB + 1
    # A 609 MiB block under pinned_max_round_threshold_mb:64 is pinned at 609 MiB, not 1 GiB.
    assert pinned_bytes(609 * K_MB, config("pinned_max_round_threshold_mb:64")) == 609 * K_MB
    assert pinned_bytes(609 * K_MB) == GiB
    huge = config("pinned_max_round_threshold_mb:99999999999999999")
    assert huge.pinned_max_round_threshold == (SIZE_MAX // K_MB) * K_MB


def test_cached_size_cap_also_stops_rounding_and_caching():
    """size <= pinned_max_cached_size is the second condition of the rounding; and
    maybe_cache_block destroys a block whose size_ > pinned_max_cached_size at free."""
    a = CachingHostAllocator(config("pinned_max_cached_size_mb:1"))
    block = a.allocate(3 * K_MB)
    assert block.size == 3 * K_MB
    a.free(block)
    s = a.host_memory_stats()
    assert (s["allocations.current"], s["num_host_alloc"], s["num_host_free"]) == (0, 1, 1)
    assert s["active_requests.current"] == 0 and s["host_free_time.count"] == 1


def test_non_blocking_copy_block_is_not_reused_before_its_event():
    """free() with a recorded stream queues an event; allocate() runs process_events first, and
    query_event says not ready while the stream is busy, so the block is not on the free list."""
    busy = {1}
    a = CachingHostAllocator(is_busy=lambda s: s in busy)
    first = a.allocate(40960)
    assert a.record_event(first, 1)
    a.free(first)
    second = a.allocate(40960)
    assert second is not first and second.ptr != first.ptr
    assert a.host_memory_stats()["allocations.current"] == 2
    assert a.pending_blocks() == [first]
    busy.clear()  # the copy finished
    a.free(second)
    third = a.allocate(40960)
    # free lists are LIFO (push_back, pop back): the last block cached comes out first
    assert third is first or third is second
    assert a.host_memory_stats()["allocations.current"] == 2  # nothing new pinned


def test_one_busy_event_holds_back_later_events_of_other_streams():
    """process_events_for_specific_size(-1) pops the oldest event from the back and returns at
    the first that is not ready, whatever its stream: a block whose stream is idle, freed
    after one whose stream is busy, waits too."""
    busy = {1}
    a = CachingHostAllocator(is_busy=lambda s: s in busy)
    held, idle = a.allocate(4096), a.allocate(4096)
    a.record_event(held, 1)
    a.record_event(idle, 2)
    a.free(held)
    a.free(idle)
    fresh = a.allocate(4096)
    assert fresh is not idle and fresh is not held


def test_host_memory_stats_as_pytorchs_test_host_memory_stats():
    """PyTorch's test/test_cuda.py test_host_memory_stats: torch.ones(10 * 1024) (40960 bytes)
    and torch.ones(20 * 1024) pinned count 16 * 1024 * 4 and 32 * 1024 * 4 bytes; each counts in
    active_requests and allocations, num_host_alloc and host_alloc_time.count; empty_cache with
    both alive changes nothing."""
    a = CachingHostAllocator()
    expected = {k: 0 for k in host_stat_keys()}
    t1 = a.allocate(10 * 1024 * 4)
    for prefix in ("active_requests", "allocations"):
        for suffix in ("allocated", "current", "peak"):
            expected[f"{prefix}.{suffix}"] += 1
    for prefix in ("allocated_bytes", "active_bytes"):
        for suffix in ("allocated", "current", "peak"):
            expected[f"{prefix}.{suffix}"] += 16 * 1024 * 4
    expected["num_host_alloc"] += 1
    expected["host_alloc_time.count"] += 1
    assert dict(a.host_memory_stats()) == expected
    t2 = a.allocate(20 * 1024 * 4)
    for prefix in ("active_requests", "allocations"):
        for suffix in ("allocated", "current", "peak"):
            expected[f"{prefix}.{suffix}"] += 1
    for prefix in ("allocated_bytes", "active_bytes"):
        for suffix in ("allocated", "current", "peak"):
            expected[f"{prefix}.{suffix}"] += 32 * 1024 * 4
    expected["num_host_alloc"] += 1
    expected["host_alloc_time.count"] += 1
    assert dict(a.host_memory_stats()) == expected
    a.empty_cache()
    assert dict(a.host_memory_stats()) == expected
    assert t1.allocated and t2.allocated


def test_free_then_empty_cache_counts():
    a = CachingHostAllocator()
    b = a.allocate(100)
    a.free(b)
    s = a.host_memory_stats()
    assert (s["active_requests.current"], s["active_requests.freed"]) == (0, 1)
    assert (s["allocations.current"], s["allocated_bytes.current"]) == (1, 128)
    a.empty_cache()
    s = a.host_memory_stats()
    assert (s["allocations.current"], s["num_host_free"], s["allocated_bytes.freed"]) == (0, 1, 128)
    a.reset_accumulated_stats()
    assert a.host_memory_stats()["num_host_free"] == 0


def test_stat_keys_match_the_installed_torch_docstring():
    """torch 2.13 (CPU) documents host_memory_stats()'s keys in its docstring; the CPU build
    cannot return them, so the documented patterns are the comparison."""
    torch = pytest.importorskip("torch")
    doc = inspect.getdoc(torch.cuda.memory.host_memory_stats)
    documented = set()
    for stem, fields in re.findall(r'"([a-z_]+)\.\{([a-z,]+)\}"', doc):
        documented |= {f"{stem}.{f}" for f in fields.split(",")}
    documented |= set(re.findall(r'"(num_host_[a-z]+)"', doc))
    assert documented == set(host_stat_keys())


def test_above_threshold_a_bucket_hands_out_a_block_of_another_size():
    """get_free_block(size) pops the back of free_list_[Log2_64_Ceil(size)] without comparing
    sizes. Unrounded blocks of 17 GiB and 20.4 GiB share bucket 35, so a 20.4 GiB request can get
    the cached 17 GiB block: the source's behaviour, kept."""
    a = CachingHostAllocator(config("pinned_max_round_threshold_mb:1"))
    small = a.allocate(17 * GiB)
    assert size_index(17 * GiB) == size_index(REQUEST_20_4_GIB) == 35
    a.free(small)
    got = a.allocate(REQUEST_20_4_GIB)
    assert got is small and got.size == 17 * GiB
    # and it is counted as the requested round size in active_bytes (get_free_block's ``size``)
    assert a.host_memory_stats()["active_bytes.current"] == REQUEST_20_4_GIB


def test_reserve_segment_serves_small_pins_and_is_never_given_back():
    """get_reserve_segment() pins pinned_reserve_segment_size_mb MiB through the slow path on
    the first allocate; blocks are carved (4 KiB rounded) from it without a CUDA call, and
    free_block returns early for them."""
    a = CachingHostAllocator(config("pinned_reserve_segment_size_mb:1"))
    b = a.allocate(1000)
    s = a.host_memory_stats()
    assert b.size == 1024 and b.from_reserve
    assert (s["host_alloc_time.count"], s["num_host_alloc"]) == (1, 1)  # the reserve's pin
    c = a.allocate(1000)
    assert c.ptr == b.ptr + 4096
    a.free(b)
    a.free(c)
    a.empty_cache()
    s = a.host_memory_stats()
    assert s["allocations.current"] == 0 and s["host_free_time.count"] == 0
    assert a.memory.pinned == K_MB  # still pinned
    big = a.allocate(2 * K_MB)  # does not fit the reserve: cudaHostAlloc
    assert not big.from_reserve and a.host_memory_stats()["host_alloc_time.count"] == 2


def test_register_threads_rule():
    a = CachingHostAllocator(config("pinned_use_cuda_host_register:True,"
                                    "pinned_num_register_threads:8"))
    assert a.register_threads(8 * 4096) == 8 and a.register_threads(8 * 4096 - 1) == 1
    assert a.allocate(1 << 20).use_register


def test_host_oom_names_rounding_waste_and_settings():
    a = CachingHostAllocator(host_memory=24 * GiB)
    with pytest.raises(HostOutOfMemoryError) as info:
        a.allocate(REQUEST_20_4_GIB)
    assert str(info.value).startswith("CUDA error: out of memory")
    facts = info.value.explanation()
    assert facts["block_size"] == 32 * GiB
    assert facts["rounding_waste"] == 32 * GiB - REQUEST_20_4_GIB
    assert any("pinned_max_round_threshold_mb" in line for line in facts["lines"])
    fixed = CachingHostAllocator(config("pinned_max_round_threshold_mb:64"), host_memory=24 * GiB)
    assert fixed.allocate(REQUEST_20_4_GIB).size == REQUEST_20_4_GIB
    assert explain_host_oom(REQUEST_20_4_GIB, config("pinned_max_round_threshold_mb:64"))[
        "rounding_waste"] == 0


def test_the_rounding_line_names_the_rule_that_applied():
    """With no threshold every pinned request is rounded; with one set, only a request at most
    the threshold is, so the line says so instead of 'every'."""
    MiB = 1 << 20
    default = " ".join(explain_host_oom(48 * MiB)["lines"])
    assert "rounds every pinned request" in default and "16.00 MiB of that (25.0%)" in default
    capped = " ".join(explain_host_oom(40 * MiB, config("pinned_max_round_threshold_mb:64"))["lines"])
    assert "every" not in capped
    assert "Under pinned_max_round_threshold_mb:64 it rounds a request of at most 64.00 MiB" in capped
    assert "24.00 MiB of that (37.5%)" in capped
