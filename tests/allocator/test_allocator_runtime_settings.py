"""Changing ``max_split_size`` at run time while split blocks are cached, as c10 does it.

c10 (``release_available_cached_blocks`` and ``release_block`` in
c10/cuda/CUDACachingAllocator.cpp, 2.4 to newest) never checks that the oversize block it picks
is a whole segment: with a constant ``max_split_size`` it always is, because ``should_split``
never cuts a block for a request at or above the threshold and ``get_free_block`` never hands
an oversize block to a smaller request. Lowering the threshold with ``_set_allocator_settings``
breaks that: a block split earlier is now "oversize", ``release_block`` calls ``cudaFree`` on an
address inside a segment, CUDA answers ``cudaErrorInvalidValue`` and ``C10_CUDA_CHECK`` raises
"CUDA error: invalid argument" (``torch.AcceleratorError``) out of the allocation. It does so
after ``num_device_free`` was counted and the ``segment_free`` entry recorded, and before the
block leaves its pool, so the block stays cached.
"""
from __future__ import annotations

import pytest

import gpumemlab as gml
from gpumemlab.allocator import CudaDriver, CudaError, DeviceCachingAllocator

MiB = 1024 * 1024


def _lowered_threshold_gpu():
    gpu = gml.SimulatedGPU("256MiB")
    a = gpu.empty(240 * MiB)  # one 240 MiB segment
    a.free()
    # max_split_size unlimited: 40 MiB is cut from the cached 240 MiB block, 200 MiB stays cached
    b = gpu.empty(40 * MiB)
    gpu.set_allocator_settings("max_split_size_mb:40")
    return gpu, b


def test_lowered_max_split_size_fails_like_cudafree_of_an_inner_address():
    gpu, b = _lowered_threshold_gpu()
    # 4 MiB: the 200 MiB cached block is now oversize for it (get_free_block refuses), a fresh
    # 20 MiB segment does not fit the 16 MiB the driver has left, so
    # release_available_cached_blocks picks the 200 MiB block (>= 40 MiB) and cudaFrees it.
    with pytest.raises(RuntimeError, match="CUDA error: invalid argument") as info:
        gpu.empty(4 * MiB)
    assert isinstance(info.value, CudaError)
    assert info.value.error == "cudaErrorInvalidValue"
    torch = pytest.importorskip("torch")
    assert isinstance(info.value, torch.AcceleratorError)
    stats = gpu.memory_stats()
    assert stats["num_device_free"] == 1  # counted before cudaFree failed
    assert stats["reserved_bytes.all.current"] == 240 * MiB  # nothing was freed
    last = gpu.snapshot()["device_traces"][0][-1]
    assert (last["action"], last["addr"], last["size"]) == ("segment_free", b.address + 40 * MiB,
                                                            200 * MiB)
    (segment,) = gpu.memory_snapshot()
    assert [(blk["size"], blk["state"]) for blk in segment["blocks"]] == [
        (40 * MiB, "active_allocated"), (200 * MiB, "inactive")]  # the block stays cached
    gpu.check_invariants()
    with pytest.raises(CudaError):  # the same request fails the same way again
        gpu.empty(4 * MiB)


def test_after_the_split_block_merges_back_the_request_succeeds():
    gpu, b = _lowered_threshold_gpu()
    b.free()  # merges back: one unsplit 240 MiB segment, oversize under the new threshold
    c = gpu.empty(4 * MiB)
    # release_available_cached_blocks cudaFrees the whole 240 MiB segment, then a 20 MiB one
    assert gpu.memory_reserved() == 20 * MiB
    assert c.size == 4 * MiB
    gpu.check_invariants()


def test_driver_refuses_cudafree_of_an_unknown_address():
    driver = CudaDriver(64 * MiB)
    ptr = driver.cuda_malloc(2 * MiB)
    with pytest.raises(CudaError, match="invalid argument"):
        driver.cuda_free(ptr + 512)
    driver.cuda_free(ptr)
    with pytest.raises(CudaError):  # a double cudaFree too
        driver.cuda_free(ptr)


def test_allocator_level_error_is_a_runtime_error():
    alloc = DeviceCachingAllocator(256 * MiB)
    alloc.free(alloc.malloc(240 * MiB))
    alloc.malloc(40 * MiB)
    alloc.set_allocator_settings("max_split_size_mb:40")
    with pytest.raises(RuntimeError, match="cudaFree"):
        alloc.malloc(4 * MiB)
