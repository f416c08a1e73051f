"""SimulatedGPU's pinned host memory: pin, non-blocking copies, host_memory_stats and the host
keys of snapshot()."""
import gc

import pytest

from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.devices.host_api import HostOutOfMemoryError, PinnedAllocation

GiB = 1 << 30


def test_pin_rounds_like_torch_pin_memory():
    gpu = SimulatedGPU("8GiB")
    p = gpu.pin(40960)
    assert isinstance(p, PinnedAllocation) and p.size == 65536
    assert gpu.host_memory_stats()["allocated_bytes.current"] == 65536
    del p
    gc.collect()
    assert gpu.host_memory_stats()["active_requests.current"] == 0
    gpu.host_empty_cache()
    assert gpu.host_memory_stats()["allocations.current"] == 0


def test_non_blocking_copy_holds_its_host_block_until_synchronize():
    gpu = SimulatedGPU("8GiB")
    host, dev = gpu.pin("1MiB"), gpu.empty("1MiB")
    gpu.copy_(dev, host, non_blocking=True)
    address = host.address
    host.free()
    again = gpu.pin("1MiB")
    assert again.address != address  # the copy may still be reading it
    gpu.synchronize()
    again.free()
    third = gpu.pin("1MiB")
    assert third.address in (address, again.address)
    assert gpu.host_memory_stats()["allocations.current"] == 2


def test_blocking_copy_records_no_event():
    gpu = SimulatedGPU("8GiB")
    host, dev = gpu.pin("1MiB"), gpu.empty("1MiB")
    gpu.copy_(host, dev)
    address = host.address
    host.free()
    assert gpu.pin("1MiB").address == address


def test_copy_rejects_bad_pairs():
    gpu = SimulatedGPU("8GiB")
    with pytest.raises(TypeError):
        gpu.copy_(gpu.pin(16), gpu.pin(16))
    with pytest.raises(ValueError):
        gpu.copy_(gpu.pin(16), gpu.empty(32))


def test_snapshot_has_host_keys_only_when_recorded():
    gpu = SimulatedGPU("8GiB")
    assert "host_segments" not in gpu.snapshot()
    gpu.record_memory_history("all", record_pinned_host_memory=True)
    keep = gpu.pin(3000)
    gone = gpu.pin(5000)
    gone.free()
    snap = gpu.snapshot()
    segs = snap["host_segments"]
    assert [s["total_size"] for s in segs] == [4096, 8192]
    assert [s["blocks"][0]["state"] for s in segs] == ["active_allocated", "inactive"]
    assert segs[0]["blocks"][0]["requested_size"] == 3000 and segs[0]["device"] == -1
    actions = [t["action"] for t in snap["host_traces"]]
    assert actions == ["segment_alloc", "alloc", "segment_alloc", "alloc", "free_requested",
                       "free_completed"]
    assert keep.size == 4096


def test_host_memory_limit_raises_cuda_oom():
    gpu = SimulatedGPU("8GiB", host_memory="24GiB")
    with pytest.raises(HostOutOfMemoryError, match="CUDA error: out of memory"):
        gpu.pin(int(20.4 * GiB))
    gpu.set_allocator_settings("pinned_max_round_threshold_mb:64")
    assert gpu.pin(int(20.4 * GiB)).size == int(20.4 * GiB)
