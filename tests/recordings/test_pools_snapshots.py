"""Snapshots with private pools: segment_pool_id and the trace's pool_id survive
gml.dump_snapshot/load_snapshot (pickle and JSON) and PyTorch's own torch.cuda._memory_viz; a bad
pool id is a clear error; replay keeps the pools apart."""
import subprocess
import sys

import pytest

import gpumemlab as gml
from gpumemlab.recordings.files import SnapshotError, normalize_snapshot

MiB = 1024 * 1024


def pooled_run():
    """A default tensor, a MemPool tensor, a graph capture with a temporary, some frees."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    gpu.record_memory_history("all")
    keep = [gpu.empty(3 * MiB)]
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        keep.append(gpu.empty(30 * MiB))
        tmp = gpu.empty(MiB)
        del tmp
    g = gpu.CUDAGraph()
    with gpu.graph(g):
        t = gpu.empty(8 * MiB)
        keep.append(gpu.empty(2 * MiB))
        del t
    keep.append(gpu.empty(512))
    return gpu, pool, g, keep


def test_snapshot_names_each_pool():
    gpu, pool, g, keep = pooled_run()
    snap = gpu.snapshot()
    ids = sorted({s["segment_pool_id"] for s in snap["segments"]})
    assert ids == [(0, 0), pool.id, g.pool()]
    trace_ids = {e["pool_id"] for e in snap["device_traces"][0] if e["action"] == "alloc"}
    assert trace_ids == {(0, 0), pool.id, g.pool()}
    assert all(type(s["segment_pool_id"]) is tuple for s in snap["segments"])


@pytest.mark.parametrize("name", ["s.pickle", "s.json"])
def test_round_trip(tmp_path, name):
    gpu, pool, g, keep = pooled_run()
    snap = gpu.snapshot()
    back = gml.load_snapshot(gml.dump_snapshot(snap, tmp_path / name))
    assert back == snap   # JSON lists come back as the tuples PyTorch writes


def test_torch_memory_viz_reads_pools(tmp_path):
    mv = pytest.importorskip("torch.cuda._memory_viz")
    gpu, pool, g, keep = pooled_run()
    snap = gpu.snapshot()
    path = gml.dump_snapshot(snap, tmp_path / "pools.pickle")
    proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"segments: {len(snap['segments'])}" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    html = mv.trace_plot(gml.load_snapshot(path))
    assert "Active Memory Timeline" in html
    mv.segment_plot(gml.load_snapshot(path))


def test_bad_pool_ids_name_the_place():
    gpu, pool, g, keep = pooled_run()
    snap = gpu.snapshot()
    snap["segments"][0]["segment_pool_id"] = (0, "one")
    with pytest.raises(SnapshotError, match=r"segment 0: 'segment_pool_id' is \(0, 'one'\)"):
        normalize_snapshot(snap)
    snap = gpu.snapshot()
    snap["device_traces"][0][0]["pool_id"] = [1, 2, 3]
    with pytest.raises(SnapshotError, match=r"device_traces\[0\]\[0\].*'pool_id' is \[1, 2, 3\]"):
        normalize_snapshot(snap)


def test_replay_keeps_pools_apart():
    """A faithful replay of the recording puts every allocation at its recorded address and every
    segment in its recorded pool; a what-if under expandable segments still keeps the pool's
    allocations in a segment of their own pool."""
    gpu, pool, g, keep = pooled_run()
    snap = gpu.snapshot()
    result = gml.replay(snap)
    assert result.address_mismatches == 0
    recorded = sorted((s["address"], s["segment_pool_id"]) for s in snap["segments"])
    shift = result.address_shift
    replayed = sorted((s["address"] - shift, s["segment_pool_id"])
                      for s in result.allocator.segments_snapshot())
    assert replayed == recorded
    result.allocator.check_invariants()
    whatif = gml.replay(snap, alloc_conf="expandable_segments:True")
    pools = {s["segment_pool_id"] for s in whatif.allocator.segments_snapshot()}
    assert pools == {(0, 0), pool.id, g.pool()}
    whatif.allocator.check_invariants()


def test_history_views_keep_pool_ids():
    """The views rebuild past states from the trace (gml.history): a segment made in a private
    pool keeps its segment_pool_id in every rebuilt snapshot, the final one included."""
    gpu, pool, g, keep = pooled_run()
    snap = gpu.snapshot()
    from gpumemlab.viz.history import History
    h = History(snap)
    rebuilt = h.goto(len(h) - 1).segments()
    assert (sorted((s["address"], s["segment_pool_id"]) for s in rebuilt)
            == sorted((s["address"], s["segment_pool_id"]) for s in snap["segments"]))
    k, e = next((k, e) for k, e in enumerate(h.events)
                if e["action"] == "segment_alloc" and e["pool_id"] == pool.id)
    assert {s["address"]: s["segment_pool_id"] for s in h.goto(k).segments()}[e["addr"]] == pool.id
