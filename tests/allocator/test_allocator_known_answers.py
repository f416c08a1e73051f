"""Known answers derived from c10/cuda/CUDACachingAllocator.cpp (docs/ALLOCATOR.md walks through it), each
with its reasoning. A fresh simulated device, default settings, one stream unless stated."""
import pytest

import gpumemlab as gml
from gpumemlab.allocator import (DeviceCachingAllocator, AllocatorConfig, format_size,
                                 get_allocation_size, round_size, roundup_power2_next_division)

MiB = 1024 * 1024
GiB = 1024 * MiB


def fresh(total="24GiB", conf=""):
    return gml.SimulatedGPU(total, alloc_conf=conf, record_frames=False)


def test_fact1_one_byte_tensor():
    # round_size(1) = 512 -> small pool -> 2 MiB segment, split since 2 MiB - 512 >= 512.
    gpu = fresh()
    x = gpu.empty(1)
    assert gpu.memory_allocated() == 512
    assert gpu.memory_reserved() == 2 * MiB
    (seg,) = gpu.memory_snapshot()
    assert seg["segment_type"] == "small"
    assert [(b["size"], b["state"]) for b in seg["blocks"]] == [
        (512, "active_allocated"), (2 * MiB - 512, "inactive")]
    assert seg["blocks"][0]["requested_size"] == 1
    stats = gpu.memory_stats()
    assert stats["inactive_split.all.current"] == 1
    assert stats["inactive_split_bytes.all.current"] == 2096640
    assert stats["requested_bytes.all.current"] == 1
    del x


def test_fact2_one_mib_is_small_and_two_share_a_segment():
    # 1048576 <= kSmallSize -> small pool; two of them fill one 2 MiB segment.
    gpu = fresh()
    a = gpu.empty(MiB)
    b = gpu.empty(MiB)
    (seg,) = gpu.memory_snapshot()
    assert seg["segment_type"] == "small" and seg["total_size"] == 2 * MiB
    assert b.address == a.address + MiB
    assert gpu.memory_stats()["segment.all.current"] == 1


def test_fact3_just_over_one_mib_takes_a_20_mib_segment():
    gpu = fresh()
    a = gpu.empty(MiB + 1)
    assert a.size == 1049088  # rounded to 512
    assert gpu.memory_reserved() == 20 * MiB
    (seg,) = gpu.memory_snapshot()
    assert seg["segment_type"] == "large"
    assert seg["blocks"][1] == {"address": a.address + 1049088, "size": 19922432,
                                "requested_size": 0, "state": "inactive", "frames": []}


@pytest.mark.parametrize("nbytes, reserved, remainder", [
    (10485759, 10 * MiB, None),  # rounds to 10 MiB exactly: a 10 MiB segment, no split
    (10485760, 10 * MiB, None),
    (10485761, 12 * MiB, 2096640),  # 10485761 -> 10486272; 12 MiB segment, split since > 1 MiB left
])
def test_fact5_ten_mib_boundary(nbytes, reserved, remainder):
    gpu = fresh()
    gpu_alloc = gpu.empty(nbytes)
    assert gpu.memory_reserved() == reserved
    blocks = gpu.memory_snapshot()[0]["blocks"]
    if remainder is None:
        assert len(blocks) == 1
    else:
        assert blocks[1]["size"] == remainder and blocks[1]["state"] == "inactive"
    del gpu_alloc


def test_no_split_when_remainder_is_at_most_one_mib():
    # Large pool splits only when the remainder is strictly more than kSmallSize (1 MiB):
    # 19 MiB from a 20 MiB segment leaves exactly 1 MiB, so the whole 20 MiB block is handed out.
    gpu = fresh()
    a = gpu.empty(19 * MiB)
    assert a.size == 20 * MiB
    assert gpu.memory_allocated() == 20 * MiB
    assert len(gpu.memory_snapshot()[0]["blocks"]) == 1


def test_fact7_free_then_same_size_reuses_address():
    gpu = fresh()
    a = gpu.empty(3 * MiB)
    addr = a.address
    a.free()
    b = gpu.empty(3 * MiB)
    assert b.address == addr
    actions = [e["action"] for e in gpu.snapshot()["device_traces"][0]]
    assert actions.count("segment_alloc") == 1


def test_best_fit_prefers_smallest_then_lowest_address():
    # Free blocks of 40, 30 and 30 MiB (in separate segments): a 25 MiB request takes the
    # lower-addressed of the two 30 MiB blocks.
    gpu = fresh()
    big = gpu.empty(40 * MiB)
    mid1 = gpu.empty(30 * MiB)
    mid2 = gpu.empty(30 * MiB)
    addrs = (big.address, mid1.address, mid2.address)
    big.free(); mid1.free(); mid2.free()
    c = gpu.empty(25 * MiB)
    assert c.address == min(addrs[1], addrs[2])


def test_fact9_streams_never_share_blocks():
    gpu = fresh()
    a = gpu.empty(3 * MiB, stream=1)
    a.free()
    b = gpu.empty(3 * MiB, stream=2)
    assert gpu.memory_stats()["segment.all.current"] == 2
    assert gpu.memory_reserved() == 40 * MiB
    del b


def test_fact10_zero_bytes_touch_nothing():
    gpu = fresh()
    before = dict(gpu.memory_stats())
    z = gpu.empty(0)
    assert z.address == 0 and z.size == 0
    assert dict(gpu.memory_stats()) == before


def test_fact11_empty_cache_releases_only_whole_free_segments():
    gpu = fresh()
    x = gpu.empty(512)
    gpu.empty_cache()
    assert gpu.memory_reserved() == 2 * MiB
    syncs = gpu.memory_stats()["num_sync_all_streams"]
    del x
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0
    assert gpu.memory_stats()["num_sync_all_streams"] == syncs + 1


def test_fact12_13_oom_retry_trace_and_message():
    # 8 GiB device: two 3 GiB tensors, free one, keep a 1.5 GiB piece of a split 3 GiB block...
    gpu = fresh("8GiB")
    a = gpu.empty(3 * GiB)
    b = gpu.empty(3 * GiB)
    spare = gpu.empty(2 * MiB)  # a free 20 MiB... no: 2 MiB -> its own 20 MiB segment
    spare.free()  # a whole free segment that the OOM retry releases
    with pytest.raises(gml.OutOfMemoryError) as info:
        gpu.empty(3 * GiB)
    stats = gpu.memory_stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 1
    trace = gpu.snapshot()["device_traces"][0]
    assert [e["action"] for e in trace[-2:]] == ["segment_free", "oom"]
    oom = trace[-1]
    assert "addr" not in oom and oom["device_free"] == 8 * GiB - 6 * GiB
    assert oom["size"] == 3 * GiB
    msg = str(info.value)
    assert msg.startswith("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total "
                          "capacity of 8.00 GiB of which 2.00 GiB is free. Of the allocated memory "
                          "6.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
                          "unallocated.")
    assert "to avoid fragmentation.  See documentation for Memory Management  (https://" in msg
    del a, b


@pytest.mark.parametrize("request_bytes, shown", [(1, "2.00 MiB"), (MiB, "2.00 MiB"),
                                                  (5 * 10**6, "20.00 MiB")])
def test_fact13_tried_to_allocate_shows_segment_size(request_bytes, shown):
    # A 2 MiB device whose only small segment is full: any new segment fails, and the message
    # names the segment size (alloc_size), not the request.
    gpu = fresh("2MiB")
    hog = [gpu.empty(MiB), gpu.empty(MiB)]
    with pytest.raises(gml.OutOfMemoryError, match=f"Tried to allocate {shown}\\. "):
        gpu.empty(request_bytes)
    del hog


@pytest.mark.parametrize("n, text", [(1024, "1024 bytes"), (1025, "1.00 KiB"),
                                     (1048576, "1024.00 KiB"), (1048577, "1.00 MiB"),
                                     (2**30, "1024.00 MiB"), (2**30 + 1, "1.00 GiB")])
def test_fact14_format_size_edges(n, text):
    assert format_size(n) == text == gml.format_size(n)


def test_fact15_max_split_size_defaults():
    gpu = fresh()
    stats = gpu.memory_stats()
    assert stats["max_split_size"] == -1
    assert gpu.snapshot()["allocator_settings"]["max_split_size"] == -1
    big = gpu.empty(300 * MiB)
    stats = gpu.memory_stats()
    assert stats["oversize_allocations.current"] == 0 and stats["oversize_segments.current"] == 0
    del big


def test_fact17_max_split_size_20_accepted_by_newest():
    assert AllocatorConfig.parse("max_split_size_mb:20").max_split_size == 20 * MiB
    with pytest.raises(ValueError, match="must be >= 20"):
        AllocatorConfig.parse("max_split_size_mb:19")


@pytest.mark.parametrize("divisions, size, rounded", [(4, 1200, 1536), (4, 1048577, 1310720),
                                                      (4, 5000000, 5242880), (2, 2049, 3072)])
def test_fact18_roundup_power2_divisions(divisions, size, rounded):
    config = AllocatorConfig.parse(f"roundup_power2_divisions:{divisions}")
    assert round_size(size, config) == rounded


def test_roundup_power2_next_division_examples():
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(1024, 4) == 1024  # powers of 2 stay
    assert roundup_power2_next_division(1025, 2048) == 2048  # step 0 -> next power of 2


def test_fact20_miss_trace_and_adjacent_frees():
    gpu = fresh()
    a = gpu.empty(5 * MiB)
    a.free()
    trace = gpu.snapshot()["device_traces"][0]
    assert [(e["action"], e["addr"]) for e in trace] == [
        ("segment_alloc", a.address), ("alloc", a.address),
        ("free_requested", a.address), ("free_completed", a.address)]
    assert trace[0]["size"] == 20 * MiB and trace[1]["size"] == 5 * MiB


def test_fact21_empty_cache_order_large_by_size_then_small():
    gpu = fresh()
    allocs = [gpu.empty(s) for s in (30 * MiB, 12 * MiB, 512, 25 * MiB, 700)]
    for x in allocs:
        x.free()
    gpu.empty_cache()
    frees = [(e["size"], e["addr"]) for e in gpu.snapshot()["device_traces"][0]
             if e["action"] == "segment_free"]
    large = [f for f in frees if f[0] > 2 * MiB]
    small = [f for f in frees if f[0] == 2 * MiB]
    assert large == sorted(large) and frees == large + small
    # 12 MiB -> 12 MiB segment, 25 MiB -> 26 MiB (2 MiB rounding), 30 MiB -> 30 MiB; 512 B and
    # 700 B share one 2 MiB small segment.
    assert [f[0] for f in large] == [12 * MiB, 26 * MiB, 30 * MiB]
    assert len(small) == 1


def test_fact22_snapshot_sums():
    gpu = fresh()
    keep = [gpu.empty(s) for s in (100, 3000, 7 * MiB, 9 * MiB)]
    keep[1].free()
    for seg in gpu.memory_snapshot():
        blocks = seg["blocks"]
        assert sum(b["size"] for b in blocks) == seg["total_size"]
        addr = seg["address"]
        for b in blocks:
            assert b["address"] == addr
            addr += b["size"]
        assert seg["allocated_size"] == sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        assert seg["requested_size"] == sum(b["requested_size"] for b in blocks if b["state"] != "inactive")


def test_fact23_record_stream_pending_free_until_next_malloc():
    gpu = fresh()
    a = gpu.empty(4 * MiB)
    gpu.record_stream(a, 7)
    addr = a.address
    del a
    (seg,) = gpu.memory_snapshot()
    assert seg["blocks"][0]["state"] == "active_pending_free"
    stats = gpu.memory_stats()
    assert stats["active_bytes.all.current"] == 4 * MiB and stats["allocated_bytes.all.current"] == 0
    trace = gpu.snapshot()["device_traces"][0]
    last = [e["action"] for e in trace if e["action"] != "snapshot"][-1]
    assert last == "free_requested"  # free_completed waits for the event
    b = gpu.empty(512)  # the next malloc finds the event complete
    seg = [s for s in gpu.memory_snapshot() if s["address"] == addr][0]
    assert all(blk["state"] == "inactive" for blk in seg["blocks"])
    del b


def test_fact24_state_recording_keeps_one_entry():
    gpu = fresh()
    gpu.record_memory_history("state")
    xs = [gpu.empty(1000) for _ in range(5)]
    assert len(gpu.snapshot()["device_traces"][0]) <= 1
    del xs


def test_fact25_snapshot_entry_only_in_later_snapshot():
    gpu = fresh()
    x = gpu.empty(1)
    first = gpu.snapshot()
    assert all(e["action"] != "snapshot" for e in first["device_traces"][0])
    second = gpu.snapshot()
    snaps = [e for e in second["device_traces"][0] if e["action"] == "snapshot"]
    assert len(snaps) == 1 and snaps[0]["size"] == 512  # total active bytes at the time
    del x


def test_get_allocation_size_table():
    assert get_allocation_size(512) == 2 * MiB
    assert get_allocation_size(MiB) == 2 * MiB
    assert get_allocation_size(MiB + 512) == 20 * MiB
    assert get_allocation_size(10 * MiB - 512) == 20 * MiB
    assert get_allocation_size(10 * MiB) == 10 * MiB
    assert get_allocation_size(11 * MiB + 512) == 12 * MiB


def test_fragmentation_5gb_free_but_2gb_fails():
    """The article's symptom: free memory exists, but no gap is large enough."""
    gpu = fresh("8GiB")
    # One 7 GiB segment carved into 7 blocks of 1 GiB (each split off the segment's free tail).
    first = gpu.empty(7 * GiB)
    first.free()
    parts = [gpu.empty(GiB) for _ in range(7)]
    for p in parts[::2]:
        p.free()  # four 1 GiB holes, separated by live blocks: 4 GiB free, scattered
    free_bytes = gpu.memory_reserved() - gpu.memory_allocated()
    assert free_bytes == 4 * GiB
    with pytest.raises(gml.OutOfMemoryError) as info:
        gpu.empty(2 * GiB)  # no hole of 2 GiB, and the driver has only 1 GiB left
    assert "4.00 GiB is reserved by PyTorch but unallocated" in str(info.value)
    gpu.check_invariants()


def test_max_split_size_keeps_oversize_blocks_whole_and_counts_them():
    gpu = fresh(conf="max_split_size_mb:100")
    a = gpu.empty(200 * MiB)
    stats = gpu.memory_stats()
    assert stats["max_split_size"] == 100 * MiB
    assert stats["oversize_allocations.current"] == 1 and stats["oversize_segments.current"] == 1
    a.free()
    # A 50 MiB request must not take the 200 MiB oversize block: new segment.
    b = gpu.empty(50 * MiB)
    assert gpu.memory_stats()["segment.all.current"] == 2
    # A 190 MiB request may reuse it (within max_non_split_rounding 20 MiB), unsplit.
    c = gpu.empty(190 * MiB)
    assert c.size == 200 * MiB
    # A 150 MiB request would waste >= 20 MiB of an oversize block: not reused.
    del b, c


def test_expandable_segments_grow_in_pages_and_unmap():
    gpu = fresh(conf="expandable_segments:True")
    a = gpu.empty(30 * MiB)  # rounded request 30 MiB -> two 20 MiB pages mapped
    assert gpu.memory_reserved() == 40 * MiB
    (seg,) = gpu.memory_snapshot()
    assert seg["is_expandable"] and seg["total_size"] == 40 * MiB
    assert gpu.memory_stats()["segment.all.current"] == 0  # ES memory is not a cudaMalloc segment
    b = gpu.empty(15 * MiB)  # 10 MiB free tail + one more page, merged into the same run
    assert gpu.memory_reserved() == 60 * MiB
    assert b.address == a.address + 30 * MiB
    assert len(gpu.memory_snapshot()) == 1
    trace = gpu.snapshot()["device_traces"][0]
    assert [e["action"] for e in trace if e["action"].startswith("segment")] == ["segment_map", "segment_map"]
    a.free(); b.free()
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0
    assert any(e["action"] == "segment_unmap" for e in gpu.snapshot()["device_traces"][0])
    gpu.check_invariants()


def test_expandable_segments_avoid_the_fragmentation_oom():
    """The same workload as the 5-GB-free story succeeds with expandable segments."""
    gpu = fresh("8GiB", conf="expandable_segments:True")
    first = gpu.empty(7 * GiB)
    first.free()
    parts = [gpu.empty(GiB) for _ in range(7)]
    for p in parts[::2]:
        p.free()
    big = gpu.empty(2 * GiB)  # unmaps free pages, remaps at the end of the segment
    assert big.size >= 2 * GiB
    gpu.check_invariants()


def test_garbage_collection_frees_every_old_whole_segment():
    # 1 GiB device, fraction 0.8 -> limit 858993459 B; GC threshold 0.5 of it = 429496729 B.
    # Six 100 MiB segments are cached (600 MiB > threshold). All six were inserted into the pool
    # at the same search count, so all have the average age and one GC pass frees all of them
    # (GC does not stop at its target). The 300 MiB request then gets a fresh segment.
    gpu = fresh("1GiB", conf="garbage_collection_threshold:0.5")
    gpu.set_per_process_memory_fraction(0.8)
    xs = [gpu.empty(100 * MiB) for _ in range(6)]
    for x in xs:
        x.free()
    y = gpu.empty(300 * MiB)
    stats = gpu.memory_stats()
    assert stats["num_device_free"] == 6 and stats["num_alloc_retries"] == 0
    assert gpu.memory_reserved() == 300 * MiB
    gpu.check_invariants()
    del y


def test_garbage_collection_keeps_recently_used_segments():
    # Limit 512 MiB, GC threshold 256 MiB. A, B, C (100 MiB) are freed at search count 3; A is
    # reused and freed again at count 4. At the next miss (count 5) ages are A=1, B=C=2, average
    # 5/3: B and C go (200 MiB >= the 44 MiB target), A stays.
    gpu = fresh("1GiB", conf="garbage_collection_threshold:0.5")
    gpu.set_per_process_memory_fraction(0.5)
    a, b, c = (gpu.empty(100 * MiB) for _ in range(3))
    a_addr = a.address
    a.free(); b.free(); c.free()
    again = gpu.empty(100 * MiB)
    assert again.address == a_addr  # best fit, lowest address
    again.free()
    big = gpu.empty(300 * MiB)
    assert gpu.memory_stats()["num_device_free"] == 2
    assert gpu.memory_reserved() == 400 * MiB
    assert any(seg["address"] == a_addr for seg in gpu.memory_snapshot())
    del big


def test_no_garbage_collection_without_a_limit():
    gpu = fresh("1GiB", conf="garbage_collection_threshold:0.5")
    xs = [gpu.empty(100 * MiB) for _ in range(6)]
    for x in xs:
        x.free()
    y = gpu.empty(300 * MiB)
    assert gpu.memory_stats()["num_device_free"] == 0
    del y


@pytest.mark.parametrize("nbytes, mapped", [(1, 2 * MiB), (5 * MiB, 20 * MiB), (30 * MiB, 40 * MiB),
                                            (40 * MiB, 40 * MiB)])
def test_expandable_segments_map_whole_pages_of_the_rounded_request(nbytes, mapped):
    gpu = fresh(conf="expandable_segments:True")
    x = gpu.empty(nbytes)
    assert gpu.memory_reserved() == mapped
    maps = [e for e in gpu.snapshot()["device_traces"][0] if e["action"] == "segment_map"]
    assert sum(e["size"] for e in maps) == mapped
    assert gpu.memory_stats()["num_device_alloc"] == len(maps)
    del x


def test_memory_fraction_caps_reserved_and_says_allowed():
    gpu = fresh("10GiB")
    gpu.set_per_process_memory_fraction(0.5)
    a = gpu.empty(4 * GiB)
    with pytest.raises(gml.OutOfMemoryError, match=r"5\.00 GiB allowed; "):
        gpu.empty(2 * GiB)
    gpu.set_per_process_memory_fraction(1.0)  # newest PyTorch: 1.0 removes the limit
    b = gpu.empty(2 * GiB)
    del a, b


def test_exabyte_request():
    gpu = fresh()
    with pytest.raises(gml.OutOfMemoryError, match="more than 1EB"):
        gpu.empty(2**60)
    assert gpu.memory_stats()["num_ooms"] == 0


def test_allocator_oom_is_a_torch_oom():
    torch = pytest.importorskip("torch")
    gpu = fresh("2MiB")
    hog = [gpu.empty(MiB), gpu.empty(MiB)]
    with pytest.raises(torch.OutOfMemoryError):
        gpu.empty(1)
    del hog


def test_allocator_direct_api():
    alloc = DeviceCachingAllocator(GiB)
    blk = alloc.malloc(1000)
    assert round_size(1000) == blk.size == 1024
    alloc.free(blk)
    with pytest.raises(ValueError, match="double free|invalid device pointer"):
        alloc.free(blk)
    alloc.check_invariants()
