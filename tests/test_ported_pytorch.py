"""Checks ported from PyTorch's own CUDA memory tests (test/test_cuda.py), rewritten for the
simulated GPU: the same sequence of settings and allocations must give the same figures."""
import math

import pytest

import gpumemlab as gml

MiB = gml.MiB


def power2_div(size, div_factor):
    """PyTorch's test helper: the expected size after roundup_power2_divisions."""
    pow2 = 1
    while pow2 < size:
        pow2 = pow2 * 2
    if pow2 == size:
        return pow2
    step = pow2 / 2 / div_factor
    ret = pow2 / 2
    while ret < size:
        ret = ret + step
    return ret


def test_allocator_settings_roundup_and_resets():
    gpu = gml.SimulatedGPU("80GiB", alloc_conf="", record_frames=False)
    key_allocated = "allocated_bytes.all.allocated"
    key_requested = "requested_bytes.all.allocated"
    nelems = 21 * 1024 * 1024
    nbytes = 4 * nelems
    nbytes_big = 4 * 100 * 1024 * 1024

    start_mem = gpu.memory_stats()[key_allocated]
    x = gpu.empty(nbytes)
    reg_mem = gpu.memory_stats()[key_allocated]
    start_requested = gpu.memory_stats()[key_requested]
    gpu.set_allocator_settings("roundup_power2_divisions:4")
    y = gpu.empty(nbytes)
    pow2_div4_mem = gpu.memory_stats()[key_allocated]
    current_requested = gpu.memory_stats()[key_requested]
    assert reg_mem - start_mem == nbytes
    assert pow2_div4_mem - reg_mem == power2_div(nbytes, 4)
    assert current_requested - start_requested == nbytes

    gpu.set_allocator_settings("garbage_collection_threshold:0.5")
    gpu.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    # ... which resets the power-of-2 divisions
    gpu.empty_cache()
    start_mem = gpu.memory_stats()[key_allocated]
    z = gpu.empty(nbytes)
    assert gpu.memory_stats()[key_allocated] - start_mem == nbytes

    gpu.empty_cache()
    gpu.set_allocator_settings(
        "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    start_mem = gpu.memory_stats()[key_allocated]
    w = gpu.empty(nbytes)
    assert gpu.memory_stats()[key_allocated] - start_mem == power2_div(nbytes, 8)

    gpu.empty_cache()
    start_mem = gpu.memory_stats()[key_allocated]
    v = gpu.empty(nbytes_big)
    assert gpu.memory_stats()[key_allocated] - start_mem == power2_div(nbytes_big, 2)

    gpu.empty_cache()
    gpu.set_allocator_settings("release_lock_on_cudamalloc:True")
    start_mem = gpu.memory_stats()[key_allocated]
    w2 = gpu.empty(nbytes)
    assert gpu.memory_stats()[key_allocated] - start_mem == nbytes

    for bad in ("foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                "pinned_num_register_threads:none", "pinned_num_register_threads:1024"):
        with pytest.raises((RuntimeError, ValueError)):
            gpu.set_allocator_settings(bad)
    del x, y, z, w, v, w2


def test_set_per_process_memory_fraction():
    total = 8 * gml.GiB
    gpu = gml.SimulatedGPU(total, alloc_conf="", record_frames=False)
    with pytest.raises(TypeError, match="Invalid type"):
        gpu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        gpu.set_per_process_memory_fraction(-0.1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        gpu.set_per_process_memory_fraction(2.0)
    gpu.set_per_process_memory_fraction(0.5)
    application = int(total * 0.499) - gpu.memory_reserved()
    tmp = gpu.empty(application)
    del tmp
    gpu.empty_cache()
    # PyTorch's test asks for half the device with some memory already reserved by earlier tests;
    # here nothing else is reserved, so ask for one byte more than the limit (c10's check is
    # reserved + segment > limit, strictly).
    application = int(total * 0.5) + 1
    with pytest.raises(gml.OutOfMemoryError, match="out of memory"):
        gpu.empty(application)
    gpu.set_per_process_memory_fraction(1.0)
    ok = gpu.empty(application)
    del ok


def test_memory_stats_cycle_of_alloc_and_free():
    """test_memory_stats-style bookkeeping: current/peak/allocated/freed move together."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="", record_frames=False)
    sizes = [1, 100, 1 << 20, (1 << 20) + 1, 3 << 20, 11 << 20]
    live = [gpu.empty(s) for s in sizes]
    stats = gpu.memory_stats()
    assert stats["allocation.all.current"] == len(sizes)
    assert stats["requested_bytes.all.current"] == sum(sizes)
    total_blocks = sum(a.size for a in live)
    assert stats["allocated_bytes.all.current"] == total_blocks
    del live
    stats = gpu.memory_stats()
    assert stats["allocation.all.current"] == 0
    assert stats["allocated_bytes.all.freed"] == stats["allocated_bytes.all.allocated"] == total_blocks
    assert stats["allocated_bytes.all.peak"] == total_blocks
    assert math.isclose(stats["reserved_bytes.all.current"], gpu.memory_reserved())


def _fraction_for(gpu, allowed_extra):
    _, all_memory = gpu.mem_get_info()
    total_allowed = allowed_extra + gpu.memory_reserved()
    fraction_allowed = total_allowed / all_memory
    assert int(fraction_allowed * all_memory) == total_allowed
    return fraction_allowed


def test_max_split_expandable():
    """test_cuda's test_max_split_expandable: settings switched between allocations, a memory
    fraction of 120 MiB, and release_cached_blocks with expandable blocks in the free list."""
    gpu = gml.SimulatedGPU("80GiB", alloc_conf="", record_frames=False)
    gpu.empty_cache()
    gpu.set_per_process_memory_fraction(_fraction_for(gpu, 120 * MiB))

    def alloc(n):
        return gpu.empty(n * MiB)

    gpu.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
    a = alloc(40)
    gpu.set_allocator_settings("expandable_segments:True,max_split_size_mb:40")
    b = alloc(40)
    gpu.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
    c = alloc(40)
    with pytest.raises(gml.OutOfMemoryError):
        alloc(40)
    del a, b, c
    # force release_cached_blocks to run with some expandable segments in the free list
    d = alloc(120)
    assert d.size == 120 * MiB
    gpu.check_invariants()


def test_garbage_collect_expandable():
    """test_cuda's test_garbage_collect_expandable: GC runs with an expandable block free."""
    gpu = gml.SimulatedGPU("80GiB", alloc_conf="", record_frames=False)
    gpu.set_per_process_memory_fraction(_fraction_for(gpu, 120 * MiB))

    def alloc(n):
        return gpu.empty(n * MiB)

    gpu.set_allocator_settings("expandable_segments:False,garbage_collection_threshold:0.5")
    a = alloc(40)
    gpu.set_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5")
    b = alloc(40)
    del a, b
    # causes GC to run; the expandable block is split, so GC leaves it alone
    c = alloc(80)
    assert c.size == 80 * MiB
    gpu.check_invariants()


def test_out_of_memory_message_for_a_huge_request():
    """test_cuda's test_out_of_memory: 800,000,000 GiB goes through malloc (under 1 EB)."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf="", record_frames=False)
    keep = gpu.empty(1024 * 4)
    with pytest.raises(RuntimeError, match="Tried to allocate 800000000.00 GiB"):
        gpu.empty(1024 * 1024 * 1024 * 800000000)
    # ... and the device still works
    assert gpu.empty(1024 * 4).size == 4096
    del keep


def test_memory_snapshot_state_frames_and_addresses():
    """test_cuda's test_memory_snapshot, on the simulator: 'state' recording keeps frames that
    point at this file, and the block address is the tensor's."""
    import random

    gpu = gml.SimulatedGPU("24GiB", alloc_conf="")
    gpu.empty_cache()
    gpu.record_memory_history("state")
    x = gpu.empty(311 * 411 * 4)
    tensors = [gpu.empty(128 * 4) for _ in range(1000)]
    rng = random.Random(0)
    while tensors:
        del tensors[rng.randint(0, len(tensors) - 1)]
    gpu.empty(128 * 5 * 4)
    ss = gpu.snapshot()
    found_it = False
    for seg in ss["segments"]:
        assert "frames" in seg
        for b in seg["blocks"]:
            if b["requested_size"] == 311 * 411 * 4:
                assert "test_ported_pytorch" in b["frames"][0]["filename"]
                found_it = True
                assert x.address == b["address"]
    assert found_it
    assert len(ss["device_traces"][0]) <= 1


@pytest.mark.parametrize("conf", ["", "expandable_segments:True"])
def test_memory_viz_reads_simulated_snapshots(conf):
    """test_cuda's test_memory_plots on the simulator: PyTorch's own _memory_viz functions (the
    ones that need no download) accept our snapshots, pending-free blocks included."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    xs = [gpu.empty(s) for s in (1, 3000, 5 * MiB, 30 * MiB, 300 * MiB)]
    xs[1].free()
    xs[3].free()
    gpu.record_stream(xs[2], 3)
    xs[2] = None  # freed while stream 3 may still use it: active_pending_free
    ss = gpu.snapshot()
    assert any(b["state"] == "active_pending_free" for s in ss["segments"] for b in s["blocks"])
    summary = mv.segsum(ss)
    assert f"total_reserved: {gpu.memory_reserved() / MiB:.1f}MiB" in summary
    trace = mv.trace(ss)
    assert "del " in trace
    for plot in (mv.trace_plot, mv.segment_plot):
        html = plot(ss)
        assert "<html" in html.lower() or "<script" in html.lower()


@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_memory_plots_metadata(context):
    """test_cuda's test_memory_plots_metadata: entries recorded while metadata is set carry it."""
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    gpu.empty_cache()
    gpu.set_memory_metadata("metadata test")
    gpu.record_memory_history(context=context)
    x = gpu.empty(3 * 4 * 4)
    del x
    gpu.empty_cache()
    gpu.set_memory_metadata("")
    ss = gpu.snapshot()
    assert ss["device_traces"][0]
    for event in ss["device_traces"][0]:
        assert event["user_metadata"] == "metadata test"
    y = gpu.empty(16)
    assert gpu.snapshot()["device_traces"][0][-1]["user_metadata"] == ""
    del y


def test_memory_snapshot_skip_actions():
    """test_cuda's test_memory_snapshot_skip_actions: skipped actions leave no trace entries."""
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    gpu.record_memory_history("all", context="all", skip_actions=["alloc", "free_requested",
                                                                   "free_completed"])
    x = gpu.empty(3 * 4 * 4)
    del x
    gpu.empty_cache()
    actions = [e["action"] for e in gpu.snapshot()["device_traces"][0]]
    assert actions == ["segment_alloc", "segment_free"]
    with pytest.raises(ValueError, match="skip_actions"):
        gpu.record_memory_history("all", skip_actions=["segment_map"])
