"""Property test: whatever the simulated GPU does, replaying its own recording reproduces it.

Random workloads (mallocs of mixed sizes on several streams, record_stream, frees, empty_cache)
run on a SimulatedGPU under
several settings; `gml.replay` of the resulting snapshot must land every allocation on its
recorded address and end in the same segments.
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpumemlab as gml

MiB = 1024 * 1024

SIZES = st.one_of(st.integers(1, 4096), st.integers(4096, MiB), st.integers(MiB + 1, 10 * MiB),
                  st.integers(10 * MiB, 120 * MiB))
OPS = st.lists(st.one_of(
    st.tuples(st.just("malloc"), SIZES, st.sampled_from([0, 0, 0, 1, 2])),
    st.tuples(st.just("record_stream"), st.integers(0, 1000), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("free"), st.integers(0, 1000)),
    st.tuples(st.just("empty_cache")),
), min_size=1, max_size=50)


def apply_op(gpu, op, live):
    """Carry out one generated op on the simulated GPU; ``live`` holds the tensors in use."""
    if op[0] == "malloc":
        try:
            live.append(gpu.empty(op[1], stream=op[2]))
        except gml.OutOfMemoryError:
            pass  # an OOM is part of the recording the replay must reproduce
    elif op[0] == "free" and live:
        live.pop(op[1] % len(live)).free()
    elif op[0] == "record_stream" and live:
        gpu.record_stream(live[op[1] % len(live)], op[2])
    elif op[0] == "empty_cache":
        gpu.empty_cache()


def _segments(snap):
    return [(s["address"], s["total_size"], [(b["size"], b["state"]) for b in s["blocks"]])
            for s in snap["segments"]]


@pytest.mark.parametrize("conf", ["", "max_split_size_mb:40", "roundup_power2_divisions:4",
                                  "expandable_segments:True"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_replaying_a_simulated_recording_reproduces_it(conf, ops):
    gpu = gml.SimulatedGPU("2GiB", alloc_conf=conf, record_frames=False)
    live = []
    for op in ops:
        apply_op(gpu, op, live)
    snap = gpu.snapshot()
    if not snap["device_traces"][0]:
        return  # nothing was recorded (no allocation happened): nothing to replay
    result = gml.replay(snap)
    assert result.address_mismatches == 0, result.notes
    assert _segments(result.snapshot) == _segments(snap)


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,max_split_size_mb:40"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, start=st.integers(0, 50))
def test_mid_run_recordings_with_ooms_replay_exactly(conf, ops, start):
    """A small card (OOMs happen) and a recording that begins after ``start`` operations, so
    segments, expandable pages and tensors exist before its first entry."""
    gpu = gml.SimulatedGPU("256MiB", alloc_conf=conf, record_frames=False)
    live = []
    for k, op in enumerate(ops):
        if k == start:
            gpu.allocator.alloc_buffer.clear()          # recording begins here
        apply_op(gpu, op, live)
    snap = gpu.snapshot()
    if not snap["device_traces"][0]:
        return
    result = gml.replay(snap, stop_on_oom=False)        # a recorded OOM is part of the run
    assert result.start_problems == [], result.start_problems
    assert result.address_mismatches == 0, (result.alloc_mismatches, result.segment_mismatches,
                                            result.oom_mismatches, result.notes)
    assert _segments(result.snapshot) == _segments(snap)


def _seeded_mid_run(seed):
    """A seeded mid-run recording on a 256 MiB card: mixed sizes up to 120 MiB (OOMs happen),
    three streams, record_stream, frees and empty_cache; recording begins at a random step."""
    import random
    rng = random.Random(seed)
    conf = rng.choice(["expandable_segments:True", "expandable_segments:True,max_split_size_mb:40",
                       ""])
    gpu = gml.SimulatedGPU("256MiB", alloc_conf=conf, record_frames=False)
    live, n = [], rng.randint(5, 60)
    start = rng.randint(0, n)
    for k in range(n):
        if k == start:
            gpu.allocator.alloc_buffer.clear()
        r = rng.random()
        if r < 0.55:
            size = rng.choice([rng.randint(1, 4096), rng.randint(4096, MiB),
                               rng.randint(MiB + 1, 10 * MiB), rng.randint(10 * MiB, 120 * MiB)])
            try:
                live.append(gpu.empty(size, stream=rng.choice([0, 0, 0, 1, 2])))
            except gml.OutOfMemoryError:
                pass
        elif r < 0.85 and live:
            live.pop(rng.randrange(len(live))).free()
        elif r < 0.92 and live:
            gpu.record_stream(live[rng.randrange(len(live))], rng.choice([1, 2, 3]))
        else:
            gpu.empty_cache()
    return gpu.snapshot()


def test_seeded_mid_run_recordings_with_ooms_and_expandable_segments_replay_exactly():
    """Hypothesis's small examples seldom run out of memory; these 60 seeded runs do, many of
    them under expandable segments with pages mapped before recording began."""
    seen = {"oom": 0, "expandable_start": 0, "both": 0}
    for seed in range(60):
        snap = _seeded_mid_run(seed)
        trace = snap["device_traces"][0]
        if not trace:
            continue
        result = gml.replay(snap, stop_on_oom=False)
        assert result.start_problems == [], (seed, result.start_problems)
        assert result.address_mismatches == 0, seed
        assert _segments(result.snapshot) == _segments(snap), seed
        oom = any(e["action"] == "oom" for e in trace)
        exp = any("expandable segments mapped" in n for n in result.notes)
        seen["oom"] += oom
        seen["expandable_start"] += exp
        seen["both"] += oom and exp
    assert seen["oom"] >= 10 and seen["expandable_start"] >= 15 and seen["both"] >= 5, seen
