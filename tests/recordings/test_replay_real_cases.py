"""Replay of the three situations found in real recorded snapshots (REAL_SNAPSHOT_VALIDATION.md):
segment releases before a new segment, expandable-segment reservation bases, and the unsplit
tail of a block live at the start. Each recording is built so that it cannot be reproduced
without the rule under test; the old behaviour is emulated by switching the rule off."""
import copy

import pytest

import gpumemlab as gml
import gpumemlab.recordings.replay.start as replay_state
import gpumemlab.recordings.replay as replaying
from gpumemlab.allocator.driver import VA_ALIGN, VA_BASE, CudaDriver
from gpumemlab.cli import main
from gpumemlab.recordings.replay import replay
from gpumemlab.recordings.files import dump_snapshot

MiB = 1024 * 1024
GiB = 1024 * MiB


def _old_release_rule(monkeypatch):
    """The engine before the fix: a release burst before a new segment was left to malloc."""
    monkeypatch.setattr(replaying, "_release_recorded", lambda *a: object())
    monkeypatch.setattr(replaying, "_was_empty_cache", lambda *a: False)


def _relocate(snap, start, lo, hi, delta):
    """Move every recorded address in [lo, hi) from trace entry ``start`` on (and in the final
    segments) by ``delta``: the same run, with the driver choosing another address."""
    trace = snap["device_traces"][0]
    for k in range(start, len(trace)):
        e = trace[k]
        if lo <= e.get("addr", -1) < hi:
            trace[k] = dict(e, addr=e["addr"] + delta)
    for seg in snap["segments"]:
        if lo <= seg["address"] < hi:
            seg["address"] += delta
            for b in seg["blocks"]:
                b["address"] += delta


# ------------------------------------------------------------------ 1. segment releases

def test_release_inside_malloc_of_a_full_device_is_replayed_before_the_malloc(monkeypatch):
    gpu = gml.SimulatedGPU("100MiB", record_frames=False)
    gpu.empty(60 * MiB).free()                     # a cached 60 MiB segment
    gpu.allocator.alloc_buffer.clear()             # recording begins
    keep = gpu.empty(80 * MiB)                     # cudaMalloc fails, cache released, retried
    snap = gpu.snapshot()
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions == ["segment_free", "segment_alloc", "alloc"]
    result = replay(snap)                          # capacity unknown: unlimited
    assert result.address_mismatches == 0 and result.reproduced
    assert result.segment_mismatches == 0
    assert [s["total_size"] for s in result.snapshot["segments"]] == [80 * MiB]
    assert list(result.timeline.reserved) == [0, 0, 80 * MiB]   # segment made at the alloc
    _old_release_rule(monkeypatch)                 # the model keeps the 60 MiB segment
    assert replay(snap).alloc_mismatches == 1
    assert keep.address == snap["segments"][0]["address"]


def _empty_cache_then_new_segment(record_all=False):
    gpu = gml.SimulatedGPU("8GiB", record_frames=False)
    if not record_all:
        gpu.allocator.record_history_settings(False)
    old = [gpu.empty(20 * MiB) for _ in range(3)]
    small = gpu.empty(4096)
    for a in old + [small]:
        a.free()                                   # 3 large + 1 small cached segments
    gpu.allocator.record_history_settings(True)    # (recording begins here unless record_all)
    gpu.empty_cache()
    live = [gpu.empty(8 * MiB), gpu.empty(8 * MiB)]   # one new 20 MiB segment, split
    snap = gpu.snapshot()
    trace = snap["device_traces"][0]
    k = next(i for i, e in enumerate(trace) if e["action"] == "segment_free")
    assert [e["action"] for e in trace[k:k + 5]] == ["segment_free"] * 4 + ["segment_alloc"]
    # the real driver put the new segment elsewhere: 1 GiB further
    new = trace[k + 4]["addr"]
    _relocate(snap, k + 4, new, new + 20 * MiB, GiB)
    return snap, k, live


@pytest.mark.parametrize("record_all", [False, True])
def test_empty_cache_before_a_new_segment_is_replayed_exactly(monkeypatch, record_all):
    snap, _k, _live = _empty_cache_then_new_segment(record_all)
    result = replay(snap)
    assert result.address_mismatches == 0 and result.reproduced
    assert len(result.snapshot["segments"]) == 1
    _old_release_rule(monkeypatch)                 # a cached 20 MiB segment serves the 8 MiB
    old = replay(snap)
    assert old.alloc_mismatches == 2 and not old.reproduced


def test_a_segment_the_model_keeps_through_empty_cache_is_a_mismatch():
    snap, k, _live = _empty_cache_then_new_segment(record_all=True)
    trace = snap["device_traces"][0]
    del trace[k + 1]                               # the recording "forgets" one release
    result = replay(snap)
    assert result.segment_mismatches == 1 and result.alloc_mismatches == 0
    assert not result.reproduced and result.address_mismatches == 1
    assert len(result.snapshot["segments"]) == 1   # released anyway, as empty_cache does


def test_a_release_the_model_cannot_make_is_a_mismatch():
    gpu = gml.SimulatedGPU("8GiB", record_frames=False)
    a = gpu.empty(20 * MiB)
    a.free()
    gpu.empty_cache()
    b = gpu.empty(4096)
    snap = gpu.snapshot()
    trace = snap["device_traces"][0]
    assert [e["action"] for e in trace[:6]] == ["segment_alloc", "alloc", "free_requested",
                                                "free_completed", "segment_free", "segment_alloc"]
    trace[2:5] = [trace[4], trace[2], trace[3]]    # released while still allocated
    result = replay(snap)
    assert result.segment_mismatches == 1 and not result.reproduced
    assert result.alloc_mismatches == 1            # b's segment was recorded where a's still is
    assert replay(gpu.snapshot()).reproduced and b.address


def test_expandable_unmap_burst_is_replayed_by_unmapping():
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True", record_frames=False)
    xs = [gpu.empty(30 * MiB) for _ in range(4)] + [gpu.empty(4096) for _ in range(3)]
    for a in xs[1:3]:
        a.free()
    gpu.empty_cache()                               # unmaps the free pages
    ys = [gpu.empty(50 * MiB), gpu.empty(8192)]
    snap = gpu.snapshot()
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "segment_unmap" in actions
    result = replay(snap)
    assert result.address_mismatches == 0 and result.reproduced
    assert result.peak_reserved == gpu.max_memory_reserved()
    assert result.timeline.reserved[-1] == gpu.memory_reserved()
    # a recorded unmap of a range the model holds mapped and allocated cannot be replayed
    trace = snap["device_traces"][0]
    k = actions.index("segment_unmap")
    bad = copy.deepcopy(snap)
    bad["device_traces"][0][k] = dict(trace[k], addr=xs[0].address)
    assert replay(bad).segment_mismatches >= 1
    assert ys and xs


# ------------------------------------------------------------------ 2. expandable reservations

def _expandable_recording(total="8GiB"):
    gpu = gml.SimulatedGPU(total, alloc_conf="expandable_segments:True", record_frames=False)
    live = []
    for k in range(40):
        live.append(gpu.empty((k % 7 + 1) * 3 * MiB + 100))
        live.append(gpu.empty(k * 1000 + 512))
        if k % 3 == 0:
            live.pop(0).free()
    snap = gpu.snapshot()
    small_base = min(s["address"] for s in snap["segments"] if s["segment_type"] == "small")
    return snap, small_base, live


def test_expandable_reservation_base_is_dictated_by_the_first_segment_map(monkeypatch):
    snap, small_base, _live = _expandable_recording()
    # the real driver reserved the small pool's range 64 GiB further away
    _relocate(snap, 0, small_base, small_base + (1 << 40), 64 * GiB)
    n_small = sum(e["action"] == "alloc" and e["size"] <= MiB for e in snap["device_traces"][0])
    result = replay(snap)
    assert result.address_mismatches == 0 and result.reproduced
    monkeypatch.setattr(CudaDriver, "reserve_next_va", lambda self, ptr: None)
    old = replay(snap)                            # the model reserves first fit
    assert old.alloc_mismatches == n_small > 0


def test_segment_map_addresses_count_in_the_address_shift():
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True", record_frames=False)
    a = gpu.empty(30 * MiB)
    a.free()
    gpu.empty_cache()                              # no final segments at all
    snap = gpu.snapshot()
    assert snap["segments"] == []
    low = 0x602000000 - VA_BASE                    # recorded in a low range, as on real GPUs
    _relocate(snap, 0, VA_BASE, VA_BASE + (1 << 44), low)
    result = replay(snap)
    assert result.address_shift == VA_BASE - 0x602000000
    assert result.address_mismatches == 0


def test_reserve_va_at_clips_to_the_free_range():
    d = CudaDriver(8 * GiB)
    taken = d.reserve_va(10 * VA_ALIGN)            # [VA_BASE, VA_BASE + 20 MiB)
    assert taken == VA_BASE
    assert d.reserve_va_at(VA_BASE + 4 * VA_ALIGN, VA_ALIGN) == 0      # inside a claim
    d.next_addresses.append(VA_BASE + 100 * VA_ALIGN)
    assert d.cuda_malloc(VA_ALIGN) == VA_BASE + 100 * VA_ALIGN
    base = VA_BASE + 50 * VA_ALIGN
    assert d.reserve_va_at(base, 1 << 40) == 50 * VA_ALIGN             # clipped at the segment
    with pytest.raises(ValueError, match="aligned"):
        d.reserve_va_at(base + 512, VA_ALIGN)
    d.release_va(base, 50 * VA_ALIGN)
    assert d.reserve_va_at(base, 3 * VA_ALIGN) == 3 * VA_ALIGN
    d.next_reservations.append(VA_BASE + 200 * VA_ALIGN)
    from gpumemlab.allocator.expandable_segment import ExpandableSegment
    es = ExpandableSegment(d, 0, GiB, 20 * MiB)
    assert es.ptr == VA_BASE + 200 * VA_ALIGN and es.reserved == es.size()
    assert not d.next_reservations
    es.release()
    assert d.reserve_va_at(VA_BASE + 200 * VA_ALIGN, es.size()) == es.size()


def _two_devices():
    snaps = []
    for k in range(2):
        gpu = gml.SimulatedGPU("4GiB", record_frames=False)
        gml.scenarios.fragmentation_oom(gpu, release=False)
        snaps.append(gpu.snapshot())
    snap = snaps[0]
    for seg in snaps[1]["segments"]:
        seg["device"] = 1
    snap["segments"] = snaps[0]["segments"] + snaps[1]["segments"]
    snap["device_traces"] = [snaps[0]["device_traces"][0], snaps[1]["device_traces"][0]]
    return snap


def test_every_device_is_verified_and_oom_messages_name_the_device(tmp_path, capsys):
    snap = _two_devices()
    r1 = replay(snap, device=1)
    assert r1.device == 1 and r1.oom is not None and "GPU 1 " in r1.oom["message"]
    assert r1.oom["entry"]["action"] == "oom" and r1.reproduced
    path = dump_snapshot(snap, tmp_path / "two.pickle")
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "(device 0)" in out and "(device 1)" in out and "as recorded" in out
    trace = snap["device_traces"][1]
    k = max(i for i, e in enumerate(trace) if e["action"] == "alloc")
    trace[k] = dict(trace[k], addr=trace[k]["addr"] + 512)
    path = dump_snapshot(snap, tmp_path / "bad.pickle")
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "device 0: reproduced" in out and "device 1: NOT reproduced" in out
    assert main(["verify", str(path), "--device", "0"]) == 0


def test_a_recorded_oom_the_model_does_not_hit_is_a_mismatch():
    snap = _two_devices()
    trace = snap["device_traces"][0]
    k = next(i for i, e in enumerate(trace) if e["action"] == "oom")
    trace[k] = dict(trace[k], size=512)            # a request that fits: no OOM in the model
    result = replay(snap, total_memory="4GiB", stop_on_oom=False)
    assert result.oom_mismatches == 1 and not result.reproduced


# ------------------------------------------------------------------ 3. unsplit tails at the start

def _unsplit_tail_recording(free_x=False):
    gpu = gml.SimulatedGPU("8GiB", record_frames=False)
    gpu.empty(64 * MiB).free()                     # one 64 MiB segment, cached
    b1 = gpu.empty(40 * MiB)
    hole = gpu.empty(4 * MiB + 512 * 1024)
    c = gpu.empty(64 * MiB - 40 * MiB - 4 * MiB - 512 * 1024)
    hole.free()
    b2 = gpu.empty(4 * MiB)                        # takes the 4.5 MiB hole: 0.5 MiB not split off
    assert b2.size == 4 * MiB + 512 * 1024
    c.free()
    gpu.allocator.alloc_buffer.clear()             # recording begins: b1 and b2 are live
    x = gpu.empty(8 * MiB)                         # at the start of the real free block
    b2.free()
    if free_x:
        x.free()
    snap = gpu.snapshot()
    return snap, b1, b2, x


def test_live_block_at_the_start_keeps_its_unsplit_tail(monkeypatch):
    snap, b1, b2, x = _unsplit_tail_recording()
    assert x.address == b2.address + b2.size
    trace = snap["device_traces"][0]
    start = replay_state.scan_start_state(snap["segments"], trace, gml.allocator.AllocatorConfig())
    assert start.live[b2.address].size == 4 * MiB + 512 * 1024
    assert start.live[b1.address].size == 40 * MiB
    result = replay(snap)
    assert result.start_problems == [] and result.address_mismatches == 0 and result.reproduced
    monkeypatch.setattr(replay_state, "_absorb_unsplit_tails", lambda *a: None)
    old = replay(snap)                             # the tail is taken for free space
    assert old.alloc_mismatches == 1


def test_a_gap_head_too_big_to_be_a_tail_is_left_free():
    snap, _b1, b2, x = _unsplit_tail_recording(free_x=True)
    trace = snap["device_traces"][0]
    start = replay_state.scan_start_state(snap["segments"], trace, gml.allocator.AllocatorConfig())
    assert start.live[b2.address].size == 4 * MiB + 512 * 1024      # unmoved: a tail
    k = next(i for i, e in enumerate(trace) if e["action"] == "alloc")
    moved = x.address + 2 * MiB                    # 2.5 MiB past the gap: should_split splits that
    for i in range(k, len(trace)):
        if trace[i].get("addr") == x.address:
            trace[i] = dict(trace[i], addr=moved)
    start = replay_state.scan_start_state(snap["segments"], trace, gml.allocator.AllocatorConfig())
    assert start.live[b2.address].size == 4 * MiB
