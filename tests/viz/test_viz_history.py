"""History rebuilds the allocator state at every event of a trace, from the snapshot alone.

Checked two ways: a hand-written trace whose states are worked out below, and simulator runs
where a snapshot taken mid-run must equal the rebuilt state at that point of the final trace.
"""
import random

import pytest

import gpumemlab as gml
from snapshot_builders import seg
from gpumemlab.viz.history import History

MiB = 1 << 20
A, S, P = 1 << 32, 1 << 31, 1 << 33


def hand_snapshot():
    """Events and the final state they lead to.

    P (40 MiB) exists before the trace and holds a live 30 MiB block (requested 30 MiB - 10).
    0 segment_alloc A 20 MiB; 1 alloc A 5 MiB-100 (-> 5 MiB block, 15 MiB split off);
    2 alloc A+5 MiB 14.5 MiB (rounds to 14.5 MiB; the 0.5 MiB rest is <= 1 MiB so the whole
    15 MiB block is taken); 3-4 free A; 5 alloc A 1 MiB+1 (-> 1049088 B, split);
    6 segment_alloc S 2 MiB (small); 7 alloc S 1000 (-> 1024); 8-9 free P's block;
    10 segment_free P.
    """
    events = [("segment_alloc", A, 20 * MiB), ("alloc", A, 5 * MiB - 100),
              ("alloc", A + 5 * MiB, 14 * MiB + MiB // 2),
              ("free_requested", A, 5 * MiB - 100), ("free_completed", A, 5 * MiB - 100),
              ("alloc", A, MiB + 1), ("segment_alloc", S, 2 * MiB), ("alloc", S, 1000),
              ("free_requested", P, 30 * MiB - 10), ("free_completed", P, 30 * MiB - 10),
              ("segment_free", P, 40 * MiB)]
    trace = [{"action": a, "addr": ad, "size": sz, "stream": 0, "time_us": t}
             for t, (a, ad, sz) in enumerate(events)]
    segs = [seg(S, [(1024, 1000, "active_allocated"), (2 * MiB - 1024, 0, "inactive")], "small"),
            seg(A, [(1049088, MiB + 1, "active_allocated"),
                    (5 * MiB - 1049088, 5 * MiB - 100, "inactive"),
                    (15 * MiB, 14 * MiB + MiB // 2, "active_allocated")])]
    return {"segments": segs, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "expandable_segments": False}}


def layout(segments):
    return [(s["address"], [(b["address"] - s["address"], b["size"], b["state"])
                            for b in s["blocks"]]) for s in segments]


def test_hand_trace_initial_state_is_inferred():
    h = History(hand_snapshot())
    assert h.warnings == []
    h.goto(-1)
    # the pre-trace 30 MiB block is rounded (30 MiB) and split from its 40 MiB segment
    assert layout(h.segments()) == [(P, [(0, 30 * MiB, "active_allocated"),
                                         (30 * MiB, 10 * MiB, "inactive")])]
    assert h.matches_final()


def test_hand_trace_states_and_totals():
    h = History(hand_snapshot())
    h.goto(2)
    assert layout(h.segments())[0] == (A, [(0, 5 * MiB, "active_allocated"),
                                           (5 * MiB, 15 * MiB, "active_allocated")])
    h.goto(3)
    assert layout(h.segments())[0][1][0] == (0, 5 * MiB, "active_pending_free")
    h.goto(5)
    assert layout(h.segments())[0][1][:2] == [(0, 1049088, "active_allocated"),
                                              (1049088, 5 * MiB - 1049088, "inactive")]
    assert h.totals["reserved_bytes"] == [60 * MiB] * 6 + [62 * MiB] * 4 + [22 * MiB]
    # allocated drops at free_requested, requested at free_completed (as in c10's stats)
    assert h.totals["allocated_bytes"][2:5] == [50 * MiB, 45 * MiB, 45 * MiB]
    assert h.totals["requested_bytes"][3] - h.totals["requested_bytes"][4] == 5 * MiB - 100
    assert h.totals["allocated_bytes"][-1] == 1049088 + 15 * MiB + 1024


def test_descriptions_say_why():
    h = History(hand_snapshot())
    h.goto(1)
    assert "no cached free block large enough, cudaMalloc of a new 20.00 MiB segment" \
        in h.last_description
    h.goto(2)
    assert "reused a cached free block of 15.00 MiB whole" in h.last_description
    h.goto(5)
    assert "split: 4.00 MiB stays cached" in h.last_description
    h.goto(9)
    assert "merged with free neighbours into a 40.00 MiB free block" in h.last_description
    h.goto(10)
    assert h.last_description.startswith("event 10: cudaFree of seg 2")


def test_goto_far_uses_checkpoints_and_agrees_with_stepping(monkeypatch):
    h = History(hand_snapshot(), checkpoint_every=4)
    expected = []
    for k in range(len(h)):
        h.goto(k)
        expected.append(layout(h.segments()))
    applied = []
    original = History.apply
    monkeypatch.setattr(History, "apply", lambda self, st, i: (applied.append(i),
                                                               original(self, st, i)))
    for k in (9, 1, 6, 0, 10, 3):
        applied.clear()
        h.goto(k)
        assert layout(h.segments()) == expected[k]
        assert len(applied) <= 4  # from the nearest checkpoint, never from the start
    applied.clear()
    h.goto(4)
    h.goto(5)
    assert applied[-1:] == [5] and len(applied) <= 5


def test_bad_input():
    h = History(hand_snapshot())
    with pytest.raises(ValueError, match="out of range"):
        h.goto(11)
    with pytest.raises(TypeError):
        h.goto("3")
    with pytest.raises(TypeError, match="snapshot"):
        History(42)
    with pytest.raises(ValueError, match="segments"):
        History({"device_traces": [[]]})


def _random_run(gpu, seed, n_ops):
    """Random allocs/frees/empty_cache; returns [(trace length, segments)] taken along the way."""
    rng = random.Random(seed)
    live, taken = [], []
    sizes = [300, 5000, 700_000, 3 * MiB, 25 * MiB, 200 * MiB, 900 * MiB]
    for i in range(n_ops):
        r = rng.random()
        if live and r < 0.42:
            live.pop(rng.randrange(len(live))).free()
        elif r < 0.45:
            gpu.empty_cache()
        elif live and r < 0.48:
            gpu.record_stream(live[rng.randrange(len(live))], 7)
        else:
            try:
                live.append(gpu.empty(rng.choice(sizes) + rng.randrange(0, 4096)))
            except gml.OutOfMemoryError:
                pass
        if i % 17 == 0:
            snap = gpu.snapshot()
            taken.append((len(snap["device_traces"][0]), snap["segments"]))
    return taken


@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "max_split_size_mb:64",
                                  "roundup_power2_divisions:4"])
def test_rebuilt_states_equal_snapshots_taken_mid_run(conf):
    gpu = gml.SimulatedGPU("3GiB", alloc_conf=conf)
    taken = _random_run(gpu, seed=len(conf), n_ops=260)
    h = History(gpu.snapshot(), checkpoint_every=16)
    assert h.warnings == []
    assert h.matches_final()
    for length, segments in taken:
        h.goto(length - 1)
        assert layout(h.segments()) == layout(segments)
    assert h.totals["reserved_bytes"][-1] == gpu.memory_reserved()
    assert h.totals["allocated_bytes"][-1] == gpu.memory_allocated()


def test_trace_cut_by_a_small_ring_buffer_still_rebuilds():
    gpu = gml.SimulatedGPU("3GiB", max_entries=40)
    _random_run(gpu, seed=3, n_ops=150)
    h = History(gpu.snapshot())
    assert len(h) <= 40 and h.matches_final()
