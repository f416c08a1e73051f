"""The browser's payload (``gpumemlab.viz.compact``) decodes to the History's block map at every
event: segments, live blocks and the free gaps between them, on a hand trace with a block alive
before the trace, and on simulator runs under four allocator settings (expandable segments map
and unmap, ``empty_cache`` frees segments, ``record_stream`` leaves blocks pending)."""
import json

import pytest

import gpumemlab as gml
from gpumemlab.viz import compact
from gpumemlab.viz.history import History
from .test_viz_history import _random_run, hand_snapshot

MiB = 1 << 20


def python_layout(h):
    return [(s.address, s.size, s.pool, s.stream, s.expandable,
             [tuple(b) for b in s.layout()]) for s in (h.state.segs[a] for a in h.state.addrs)]


def assert_round_trip(h, events):
    meta, data = compact.encode(h)
    json.dumps(meta)  # the metadata travels as JSON
    for k in events:
        h.goto(k)
        assert compact.decode(meta, data, k) == python_layout(h), f"event {k}"
    return meta, data


def test_hand_trace_round_trips_at_every_event():
    h = History(hand_snapshot())
    meta, data = assert_round_trip(h, range(-1, len(h)))
    assert meta["n_events"] == 11 and meta["n_segments"] == 3  # P, A and S, never resized
    c = compact.columns(meta, data)
    # the pre-trace block of P lives from the start (t0 = 0) until its free_requested (event 8)
    first = [i for i in range(meta["n_blocks"]) if c["block_t0"][i] == 0]
    assert len(first) == 1 and c["block_t1"][first[0]] == 9
    assert list(c["event_reserved"]) == h.totals["reserved_bytes"]


@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "max_split_size_mb:64",
                                  "roundup_power2_divisions:4"])
def test_simulator_runs_round_trip(conf):
    gpu = gml.SimulatedGPU("3GiB", alloc_conf=conf)
    _random_run(gpu, seed=len(conf) + 1, n_ops=300)
    h = History(gpu.snapshot(), checkpoint_every=16)
    assert h.warnings == []
    n = len(h)
    meta, data = assert_round_trip(h, [-1, 0, 1, n // 7, n // 3, n // 2, 2 * n // 3, n - 2,
                                       n - 1] + list(range(0, n, max(1, n // 40))))
    assert meta["n_events"] == n
    actions = {e["action"] for e in h.events}
    if conf.startswith("expandable"):
        assert {"segment_map", "segment_unmap"} <= actions
    else:
        assert "segment_free" in actions


def test_blocks_carry_their_allocating_frame_and_state_codes():
    gpu = gml.SimulatedGPU("1GiB")
    x = gpu.empty(3 * MiB)
    y = gpu.empty(5 * MiB)
    x.free()
    h = History(gpu.snapshot())
    meta, data = compact.encode(h)
    c = compact.columns(meta, data)
    n = meta["n_blocks"]
    states = [meta["states"][str(c["block_state"][i])] for i in range(n)]
    # x: allocated, then pending (free_requested), gone at free_completed; y: allocated to the end
    assert sorted(states) == ["active_allocated", "active_allocated", "active_pending_free"]
    frames = {meta["frames"][c["block_frame"][i]] for i in range(n)}
    assert len(frames) == 2 and all("test_viz_compact.py" in f for f in frames)
    ends = sorted(c["block_t1"][i] for i in range(n))
    assert ends[-1] == len(h) + 1  # y is still alive after the last event
    del y


def test_columns_are_aligned_for_typed_arrays():
    h = History(hand_snapshot())
    meta, data = compact.encode(h)
    for name, place in meta["columns"].items():
        assert place["offset"] % 8 == 0, name
    assert len(data) % 8 == 0
