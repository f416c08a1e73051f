"""The torch.cuda-shaped facade: sizes, Allocation lifetime, and bad input that changes nothing."""
import gc

import pytest

import gpumemlab as gml

MiB = gml.MiB


def gpu_(total="4GiB", **kw):
    return gml.SimulatedGPU(total, alloc_conf="", record_frames=False, **kw)


@pytest.mark.parametrize("text, nbytes", [("24GiB", 24 * 2**30), ("80GB", 80 * 10**9),
                                          ("512MiB", 512 * 2**20), ("1.5GiB", 3 * 2**29),
                                          (4096, 4096), ("512 MiB", 512 * 2**20)])
def test_parse_size(text, nbytes):
    assert gml.parse_size(text) == nbytes


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), ("12 parsecs", ValueError), (1.5, TypeError),
                                      (True, TypeError), ("0.3B", ValueError), (None, TypeError)])
def test_parse_size_errors(bad, exc):
    with pytest.raises(exc):
        gml.parse_size(bad)


def test_allocation_fields_and_lifetime():
    gpu = gpu_()
    a = gpu.empty(1000)
    assert (a.nbytes, a.size, a.stream) == (1000, 1024, 0)
    assert gpu.memory_allocated() == 1024
    del a
    gc.collect()
    assert gpu.memory_allocated() == 0
    assert gpu.memory_reserved() == 2 * MiB  # cached, not returned


def test_peaks_and_reset():
    gpu = gpu_()
    a = gpu.empty(30 * MiB)
    a.free()
    assert gpu.max_memory_allocated() == 30 * MiB and gpu.memory_allocated() == 0
    gpu.reset_peak_memory_stats()
    assert gpu.max_memory_allocated() == 0
    assert gpu.max_memory_reserved() == gpu.memory_reserved() == 30 * MiB


def test_memory_stats_keys_match_torch():
    stats = gpu_().memory_stats()
    assert list(stats) == sorted(stats)
    for name in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                 "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                assert f"{name}.{pool}.{metric}" in stats
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                "num_device_free", "max_split_size", "oversize_allocations.current",
                "oversize_segments.peak"):
        assert key in stats


def test_summary_layout():
    gpu = gpu_()
    x = gpu.empty(1)
    text = gpu.memory_summary()
    lines = text.splitlines()
    assert all(len(line) == 77 for line in lines)  # 75 characters inside |...|
    assert "PyTorch CUDA memory summary, device ID 0" in lines[1]
    assert any(line.startswith("| Allocated memory      |    512 B") for line in lines)
    assert len(gpu.memory_summary(abbreviated=True).splitlines()) < len(lines)
    del x


@pytest.mark.parametrize("call", [
    lambda g: g.empty(-5), lambda g: g.empty(1.5), lambda g: g.empty("lots"),
    lambda g: g.empty(10, stream=-1), lambda g: g.empty(True),
    lambda g: g.set_allocator_settings("nonsense:1"), lambda g: g.set_per_process_memory_fraction(2.0),
    lambda g: g.set_per_process_memory_fraction(1), lambda g: g.record_stream(object(), 1),
])
def test_bad_input_raises_and_changes_nothing(call):
    gpu = gpu_()
    keep = gpu.empty(3 * MiB)
    before = (dict(gpu.memory_stats()), gpu.memory_snapshot(), gpu.snapshot()["allocator_settings"])
    with pytest.raises((ValueError, TypeError)):
        call(gpu)
    after = (dict(gpu.memory_stats()), gpu.memory_snapshot(), gpu.snapshot()["allocator_settings"])
    assert before[0] == after[0] and before[1] == after[1] and before[2] == after[2]
    del keep


def test_double_free_and_foreign_free():
    g1, g2 = gpu_(), gpu_()
    a = g1.empty(100)
    a.free()
    with pytest.raises(ValueError, match="double free"):
        a.free()
    b = g1.empty(100)
    with pytest.raises(ValueError, match="another device"):
        g2.free(b)
    assert g1.memory_allocated() == 512


def test_absurd_total_memory():
    with pytest.raises(ValueError):
        gml.SimulatedGPU("1KiB")
    with pytest.raises(ValueError):
        gml.SimulatedGPU(2**60)


def test_describe_says_simulated():
    gpu = gml.SimulatedGPU("16GiB", alloc_conf="expandable_segments:True")
    line = gpu.describe()
    assert "simulated" in line and "16.00 GiB" in line and "expandable_segments:True" in line
    assert gpu.kind == "simulated"


def test_frames_recorded_from_the_caller():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    x = gpu.empty(4096)
    (seg,) = gpu.memory_snapshot()
    frame = seg["blocks"][0]["frames"][0]
    assert frame["filename"] == __file__ and frame["name"] == "test_frames_recorded_from_the_caller"
    del x


def test_mem_get_info():
    gpu = gpu_("1GiB")
    a = gpu.empty(100 * MiB)
    assert gpu.mem_get_info() == (2**30 - 100 * MiB, 2**30)
    del a


def test_other_memory_outside_the_allocator():
    # A real 8 GiB card loses memory to the CUDA context: 7.5 GiB cannot fit any more.
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="", record_frames=False, other_memory="512MiB")
    assert gpu.mem_get_info() == (8 * gml.GiB - 512 * MiB, 8 * gml.GiB)
    with pytest.raises(gml.OutOfMemoryError) as info:
        gpu.empty(7 * gml.GiB + 600 * MiB)
    assert "has a total capacity of 8.00 GiB of which 7.50 GiB is free" in str(info.value)
    assert "512.00 MiB held outside PyTorch" in gpu.describe()
    with pytest.raises(ValueError):
        gml.SimulatedGPU("1GiB", other_memory="1GiB")


def test_history_ring_buffer_keeps_the_newest_entries_in_order():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="", record_frames=False, max_entries=5)
    keep = [gpu.empty(512 * (i + 1)) for i in range(10)]  # one segment_alloc, then 10 allocs
    trace = gpu.snapshot()["device_traces"][0]
    assert len(trace) == 5
    assert [e["action"] for e in trace] == ["alloc"] * 5
    assert [e["size"] for e in trace] == [512 * (i + 1) for i in range(5, 10)]
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)
    del keep
