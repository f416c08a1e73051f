"""The cycle collector stays off the hot path without leaking: a replay pauses it and restores
it, cycles made meanwhile are still collected, and a long default history adds nothing the
collector has to scan."""
from __future__ import annotations

import gc
import tracemalloc

import gpumemlab as gml
from gpumemlab.recordings.gc_pause import collector_paused


def _recording():
    gpu = gml.SimulatedGPU("2GiB", alloc_conf="")
    keep = []
    for i in range(300):
        a = gpu.empty((i % 17 + 1) * 256 * 1024)
        if i % 3:
            keep.append(a)
        else:
            a.free()
    return gpu.snapshot()


def test_replay_restores_the_collector_state():
    snap = _recording()
    assert gc.isenabled()
    result = gml.replay(snap)
    assert result.address_mismatches == 0 and gc.isenabled()
    gc.disable()
    try:
        gml.replay(snap)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_cycles_made_while_paused_are_collected_afterwards():
    @collector_paused
    def make_cycles(n):
        for _ in range(n):
            a = []
            a.append(a)

    tracemalloc.start()
    try:
        make_cycles(10)  # warm up
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        make_cycles(20_000)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 200_000  # 20,000 unreachable cycles came back


def test_replay_memory_returns():
    snap = _recording()
    gml.replay(snap)  # warm up caches and imports
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            gml.replay(snap)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 500_000


def test_a_long_history_gives_the_collector_nothing_new_to_track():
    gpu = gml.SimulatedGPU("1GiB")
    gc.collect()
    tracked = len(gc.get_objects())
    for _ in range(5_000):
        gpu.empty(4096).free()
    gc.collect()
    assert len(gpu.allocator.alloc_buffer) == 15_001  # segment_alloc, then alloc + 2 frees each
    assert len(gc.get_objects()) - tracked < 100
