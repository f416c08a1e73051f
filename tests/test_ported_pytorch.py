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
