"""Replay: faithful reproduction of recordings (start state included), what-if, bad traces."""
import random

import pytest

import gpumemlab as gml
from gpumemlab import scenarios
from gpumemlab.recordings.replay import ReplayError, replay
from gpumemlab.recordings.files import dump_snapshot

MiB = 1024 * 1024


def _layout(snap):
    return [(s["address"], s["total_size"], [(b["size"], b["state"]) for b in s["blocks"]])
            for s in snap["segments"]]


def _recording(seed=0, steps=1500):
    """A simulated run whose history starts mid-run: live tensors and cached segments exist."""
    rng = random.Random(seed)
    gpu = gml.SimulatedGPU("8GiB", record_frames=False)
    before = [gpu.empty(rng.randint(1, 30 * MiB)) for _ in range(20)]
    for a in before[::3]:
        a.free()
    before = [a for a in before if not a.freed]
    gpu.allocator.alloc_buffer.clear()          # recording "begins" now
    live = []
    for step in range(steps):
        if live and rng.random() < 0.5:
            live.pop(rng.randrange(len(live))).free()
        else:
            size = rng.choice([rng.randint(1, MiB), rng.randint(MiB, 40 * MiB)])
            live.append(gpu.empty(size))
        if step % 500 == 0:
            gpu.empty_cache()
    for a in before[:3]:                        # frees of allocations made before recording
        a.free()
    return gpu.snapshot(), (gpu, live, before)


def test_faithful_replay_reproduces_every_address_and_final_state():
    snap, _keep = _recording()
    trace = snap["device_traces"][0]
    assert trace[0]["action"] != "segment_alloc" or any(
        e["action"] == "free_completed" for e in trace)
    result = replay(snap)
    assert result.faithful and result.start_problems == [] and result.notes == []
    assert result.allocations == sum(e["action"] == "alloc" for e in trace)
    assert result.address_mismatches == 0 and result.reproduced
    assert _layout(result.snapshot) == _layout(snap)
    assert len(result.timeline) == len(trace) == result.replayed
    assert result.peak_reserved == max(result.timeline.reserved)
    assert result.timeline.allocated[-1] == sum(s["allocated_size"] for s in snap["segments"])


def test_a_wrong_model_is_caught_as_mismatches():
    snap, _keep = _recording(seed=1, steps=400)
    # shift one recorded alloc to another address: the model cannot agree with it
    trace = snap["device_traces"][0]
    k = next(i for i, e in enumerate(trace) if e["action"] == "alloc" and
             trace[i - 1]["action"] != "segment_alloc")
    old = trace[k]["addr"]
    trace[k] = dict(trace[k], addr=old + 512)
    for j in range(k + 1, len(trace)):
        if trace[j]["addr"] == old and trace[j]["action"].startswith("free"):
            trace[j] = dict(trace[j], addr=old + 512)
            if trace[j]["action"] == "free_completed":
                break
    result = replay(snap)
    assert result.address_mismatches == 1 and not result.reproduced


def test_what_if_expandable_segments_avoids_the_fragmentation_oom(tmp_path):
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    rec = scenarios.fragmentation_oom(gpu, release=False)
    assert rec.oom is not None
    path = dump_snapshot(rec.snapshot, tmp_path / "frag.pickle")
    same = replay(path)
    assert same.total_memory == 4 * 1024 * MiB          # inferred from the recorded OOM
    assert same.oom is not None and same.address_mismatches == 0
    es = replay(path, alloc_conf="expandable_segments:True")
    assert not es.faithful and es.oom is None
    bigger = replay(path, total_memory="8GiB")
    assert bigger.oom is None


def test_capacity_what_if_finds_the_first_oom():
    snap, _keep = _recording(seed=2, steps=600)
    full = replay(snap)
    from gpumemlab.allocator import AllocatorConfig
    from gpumemlab.recordings.replay.start import scan_start_state, start_reserved_bytes
    from gpumemlab.recordings.replay.trim import start_live_bytes
    state = scan_start_state(snap["segments"], snap["device_traces"][0], AllocatorConfig())
    start, live = start_reserved_bytes(state), start_live_bytes(state)
    cap = max(full.peak_reserved // 2, start + 64 * MiB)
    assert cap < full.peak_reserved
    # a card too small for what was live when recording began: an OOM at entry 0 (what was
    # cached then would have been released; replay/trim.py)
    tiny = replay(snap, total_memory=live // 2)
    assert tiny.oom["index"] == 0 and tiny.oom["during"] == "start state"
    assert tiny.oom["shortfall_bytes"] == live - live // 2 and tiny.replayed == 0
    assert tiny.oom["size"] is None and tiny.oom["live_bytes"] == live
    assert tiny.start_problems == [] and tiny.start_trim["cached_bytes"] == start - live
    small = replay(snap, total_memory=cap)
    assert small.start_problems == [] and small.oom is not None and small.oom["index"] < len(snap["device_traces"][0])
    assert "out of memory" in small.oom["message"]
    assert small.replayed == small.oom["index"] + 1            # stopped there
    assert replay(snap, total_memory=cap, stop_on_oom=False).replayed == \
        len(snap["device_traces"][0])


def test_free_of_never_allocated_address_is_reported_not_fatal():
    snap = {"segments": [], "device_traces": [[
        {"action": "segment_alloc", "addr": 0x7F0000000000, "size": 2 * MiB, "stream": 0},
        {"action": "alloc", "addr": 0x7F0000000000, "size": 100, "stream": 0},
        {"action": "free_completed", "addr": 0x7F0000000000, "size": 100, "stream": 0},
        {"action": "free_completed", "addr": 0x7F0000000000, "size": 100, "stream": 0},
    ]]}
    result = replay(snap)
    assert result.allocations == 1
    assert any("never allocated" in n for n in result.notes)


def test_sources_without_history_are_refused_clearly():
    with pytest.raises(ReplayError, match="no trace"):
        replay({"segments": []})
    with pytest.raises(ReplayError, match="not int"):
        replay(42)
    with pytest.raises(ReplayError, match="device 3"):
        replay({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 1}]]},
               device=3)
    with pytest.raises(ReplayError, match="alloc_conf"):
        replay({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 1}]]},
               alloc_conf="bogus_key:1")


def test_progress_is_reported():
    snap, _keep = _recording(seed=3, steps=300)
    seen = []
    replay(snap, progress=lambda done, total: seen.append((done, total)))
    n = len(snap["device_traces"][0])
    assert seen[-1] == (n, n)


def test_capture_replays_on_a_simulated_gpu():
    torch = pytest.importorskip("torch")
    from gpumemlab.lessons.capture_demo import tiny_transformer, train_step
    model, opt = tiny_transformer(d_model=64, n_layers=1, seq_len=16, vocab=128)
    with gml.capture(model, opt) as rec:
        train_step(model, opt, batch_size=2)
    gpu = gml.SimulatedGPU("1GiB")
    result = rec.replay(gpu)
    assert result.address_mismatches is None and result.allocations == rec.allocations
    assert gpu.memory_allocated() >= sum(p.numel() * 4 for p in model.parameters())
    assert gpu.max_memory_allocated() >= rec.peak_live_bytes()
    assert torch is not None


def test_timeline_rows_read_like_records():
    import gpumemlab as gml
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="", record_frames=False)
    a = gpu.empty(3 * 2**20)
    b = gpu.empty(100)
    del a
    r = gml.replay(gpu.snapshot())
    last = r.timeline[-1]
    assert last["allocated_bytes"] == r.timeline.allocated[-1] == gpu.memory_allocated()
    assert last["reserved_bytes"] == gpu.memory_reserved()
    assert last["event"] == len(r.timeline) - 1
    rows = list(r.timeline)
    assert len(rows) == len(r.timeline) and rows[0]["event"] == 0
    assert max(row["reserved_bytes"] for row in rows) == r.peak_reserved
    del b


def test_settings_given_beside_a_gpu_are_refused_not_dropped():
    snap, _keep = _recording(seed=5, steps=100)
    gpu = gml.SimulatedGPU("8GiB", record_frames=False)
    with pytest.raises(ValueError, match="alloc_conf= would be ignored"):
        gml.replay(snap, alloc_conf="expandable_segments:True", gpu=gpu)
    with pytest.raises(ValueError, match="total_memory= would be ignored"):
        gml.replay(snap, total_memory="4GiB", gpu=gpu)
    assert gpu.memory_reserved() == 0            # nothing ran
    assert gml.replay(snap, gpu=gpu).allocations > 0


def test_result_fields_are_declared_and_documented():
    import dataclasses
    import inspect
    from gpumemlab.recordings.replay.result import ReplayResult
    snap, _keep = _recording(seed=6, steps=100)
    result = replay(snap)
    declared = {f.name for f in dataclasses.fields(ReplayResult)}
    assert set(vars(result)) == declared          # no field appears only at the call site
    source = inspect.getsource(ReplayResult)
    for name in declared - {"_snapshot"}:
        line = next(l for l in source.splitlines() if l.strip().startswith(f"{name}:"))
        assert "#" in line, f"{name} has no comment saying what it holds"


def test_every_reader_normalises_the_same_way():
    """A dict in an old layout (no block addresses, the docstring's state name, no totals) reads
    the same through replay, the views and read_snapshot as after normalize_snapshot."""
    from gpumemlab.recordings.files import normalize_snapshot
    from gpumemlab.recordings.source import read_snapshot
    from gpumemlab.viz.source import read_source
    raw = {"segments": [{"address": 1 << 32, "blocks": [
        {"size": 2 * MiB, "state": "active_awaiting_free"},
        {"size": 18 * MiB, "state": "inactive"}]}],
        "device_traces": [[{"action": "alloc", "addr": 1 << 32, "size": 2 * MiB}]]}
    expected, notes = normalize_snapshot(raw)
    assert notes and "address" not in raw["segments"][0]["blocks"][0]
    assert read_snapshot(raw).snapshot == expected
    assert read_source(raw).snapshot == expected
    once = read_snapshot(raw)
    assert read_snapshot(once) is once            # a normalised Snapshot is not re-checked
    assert replay(once).allocations == replay(raw).allocations == 1


def _expandable_mid_run(seed=0, steps=400):
    rng = random.Random(seed)
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True", record_frames=False)
    before = [gpu.empty(rng.randint(1, 30 * MiB), stream=rng.choice([0, 1])) for _ in range(20)]
    for a in before[::3]:
        a.free()
    gpu.empty(5 * MiB).free()
    gpu.allocator.alloc_buffer.clear()               # recording begins: pages already mapped
    live = []
    for step in range(steps):
        if live and rng.random() < 0.5:
            live.pop(rng.randrange(len(live))).free()
        else:
            live.append(gpu.empty(rng.choice([rng.randint(1, MiB), rng.randint(MiB, 40 * MiB)])))
        if step % 150 == 0:
            gpu.empty_cache()
    return gpu.snapshot(), (gpu, live, before)


def test_expandable_segments_mapped_before_recording_are_rebuilt_exactly():
    snap, (gpu, _live, _before) = _expandable_mid_run()
    trace = snap["device_traces"][0]
    # the recording has no segment_map for pages that were mapped when it began
    mapped_in_trace = sum(e["size"] for e in trace if e["action"] == "segment_map")
    assert mapped_in_trace < gpu.max_memory_reserved()
    result = replay(snap)
    assert result.start_problems == [] and result.address_mismatches == 0 and result.reproduced
    assert _layout(result.snapshot) == _layout(snap)
    assert any("expandable segments mapped before recording began" in n for n in result.notes)
    assert result.timeline.reserved[-1] == gpu.memory_reserved()


def test_a_start_state_that_cannot_be_rebuilt_warns_and_says_so():
    snap, _keep = _expandable_mid_run(seed=1)
    seg = next(s for s in snap["segments"] if s["is_expandable"] and s["segment_type"] == "large")
    seg["address"] += 512 * 1024            # pages no longer on a page boundary of any base
    for k, b in enumerate(seg["blocks"]):
        b["address"] += 512 * 1024
    from gpumemlab.recordings.replay.result import ReplayWarning
    with pytest.warns(ReplayWarning, match="start state could not be rebuilt exactly"):
        result = replay(snap)
    assert result.start_problems and not result.reproduced


def test_a_recorded_oom_served_by_the_what_if_shows_in_its_timeline():
    """The last point of a what-if that copes with the recorded OOM has the request allocated."""
    GiB = 1 << 30
    sim = gml.SimulatedGPU("8GiB", alloc_conf="")
    sim.record_memory_history()
    sim.empty(7 * GiB).free()
    pieces = [sim.empty(GiB) for _ in range(7)]
    for i in (0, 2, 4, 6):
        pieces[i].free()
    with pytest.raises(gml.OutOfMemoryError):
        sim.empty(2 * GiB)
    snap = sim.snapshot()
    es = replay(snap, alloc_conf="expandable_segments:True", total_memory=8 * GiB)
    assert es.oom is None
    assert es.timeline.allocated[-1] == es.timeline.allocated[-2] + 2 * GiB
    plain = replay(snap, alloc_conf="", total_memory=8 * GiB)
    assert plain.oom is not None and plain.timeline.allocated[-1] == 3 * GiB
