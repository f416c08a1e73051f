"""More checks in the spirit of PyTorch's CUDA memory tests (test/test_cuda.py) for the simulated
GPU: stats bookkeeping, PyTorch's own _memory_viz on our snapshots, memory metadata and
skip_actions. The one-to-one ports of PyTorch's tests are in test_ported_pytorch_cuda.py."""
import math

import pytest

import gpumemlab as gml

MiB = gml.MiB


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
