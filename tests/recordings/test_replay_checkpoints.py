"""Resuming a faithful replay from a state saved on an unlimited card (the smallest-card search's
shortcut) gives what a replay from the start on that card gives: outcome, peaks, mismatches and
the final segments; on recorded real runs and on a seeded one; and a saved state copies a
segment split into thousands of blocks (deepcopy would recurse along its chain)."""
import pickle
import random
from pathlib import Path

import pytest

import gpumemlab as gml
from gpumemlab.allocator import AllocatorConfig, DeviceCachingAllocator, OutOfMemoryError
from gpumemlab.doctor.search import smallest_card
from gpumemlab.recordings.replay import resume
from gpumemlab.recordings.replay.checkpoints import Checkpoints, checkpoints_exact, copy_state
from gpumemlab.recordings.replay.prepare import UNLIMITED_BYTES, recorded_alloc_conf
from gpumemlab.recordings.source import read_snapshot

MiB = 1 << 20
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _seeded(entries=6000, seed=5, capacity=512 * MiB):
    rng = random.Random(seed)
    alloc = DeviceCachingAllocator(capacity, record_history=True, record_context=None)
    live = []
    while len(alloc.alloc_buffer) < entries:
        if live and (len(live) > 200 or rng.random() < 0.48):
            alloc.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice((rng.randint(1, 512 * 1024), rng.randint(MiB, 12 * MiB),
                               rng.randint(12 * MiB, 64 * MiB)))
            try:
                live.append(alloc.malloc(size))
            except OutOfMemoryError:
                for _ in range(len(live) // 2):
                    alloc.free(live.pop(rng.randrange(len(live))))
    return read_snapshot(alloc.snapshot())


def _figures(r):
    return (None if r.oom is None else r.oom["index"], r.peak_reserved, r.peak_allocated,
            r.allocations, r.address_mismatches, r.replayed, r.notes, r.start_problems,
            r.snapshot["segments"])


def _check_resumes(snap):
    n = len(snap.snapshot["device_traces"][0])
    saves = Checkpoints(n, saves=12)
    top = gml.replay(snap, total_memory=UNLIMITED_BYTES, checkpoints=saves)
    assert saves.setup is not None and saves.saved
    peaks = sorted({peak for _, peak, _, _ in saves.saved})
    caps = peaks + [(a + b) // 2 for a, b in zip(peaks, peaks[1:])] + [top.peak_reserved - 2 * MiB]
    resumed = 0
    for cap in caps:
        r = resume(snap, saves, cap)
        if r is None:
            continue
        resumed += 1
        assert _figures(r) == _figures(gml.replay(snap, total_memory=cap)), cap
    return resumed


def test_a_resumed_replay_is_the_replay_from_the_start_on_a_seeded_run():
    assert _check_resumes(_seeded()) >= 4


@pytest.mark.parametrize("name", sorted(p.stem for p in REAL.glob("*.pickle"))[:4])
def test_a_resumed_replay_is_the_replay_from_the_start_on_real_recordings(name):
    snap = read_snapshot(str(REAL / f"{name}.pickle"))
    if not checkpoints_exact(AllocatorConfig.parse(recorded_alloc_conf(snap.snapshot))) or \
            len(snap.snapshot["device_traces"][0]) < 200:
        pytest.skip("recorded under expandable segments or a fraction, or too short")
    _check_resumes(snap)


def test_the_card_search_with_saved_states_finds_the_card_of_a_search_without(monkeypatch):
    snap = _seeded(seed=7)
    fast = smallest_card(snap, "", 0)
    from gpumemlab.doctor import search
    monkeypatch.setattr(search, "checkpoints_exact", lambda config: False)
    slow = smallest_card(snap, "", 0)
    assert fast == slow and fast["bytes"] is not None


def test_saved_states_are_not_used_where_the_card_changes_the_rules():
    assert not checkpoints_exact(AllocatorConfig.parse("expandable_segments:True"))
    assert not checkpoints_exact(AllocatorConfig.parse("per_process_memory_fraction:0.9"))
    assert checkpoints_exact(AllocatorConfig.parse("max_split_size_mb:64"))


def test_a_segment_of_thousands_of_blocks_is_copied_without_deep_recursion():
    alloc = DeviceCachingAllocator(1 << 40, record_history=False)
    alloc.free(alloc.malloc(4000 * MiB))               # one whole free 4000 MiB segment
    chain = [alloc.malloc(MiB + 300 * 1024) for _ in range(3000)]   # each splits it again
    for b in chain[::3]:
        alloc.free(b)
    assert chain[-1].prev is chain[-2] and chain[-1].next is not None
    live = {b.ptr: b for b in chain if b.allocated}
    state = {"alloc": alloc, "live": live}
    copied = copy_state(state)
    assert pickle.dumps(copied["alloc"].snapshot()) == pickle.dumps(alloc.snapshot())
    for addr, b in copied["live"].items():
        assert copied["alloc"].active_blocks[addr] is b and b is not live[addr]
    copied["alloc"].free(next(iter(copied["live"].values())))   # the copy is its own
    assert len(alloc.active_blocks) == len(live)


def test_replays_of_one_snapshot_scan_its_start_state_once_per_rounding(monkeypatch):
    """Before: one whole-trace scan per replay (3 s of a 3.5 s candidate on 1M entries)."""
    import gpumemlab.recordings.replay as rp
    calls = []
    scan = rp.scan_start_state
    monkeypatch.setattr(rp, "scan_start_state", lambda *a: calls.append(1) or scan(*a))
    snap = _seeded(entries=3000, seed=9)
    first = gml.replay(snap)
    again = [gml.replay(snap, alloc_conf=c, total_memory=256 * MiB)
             for c in ("", "max_split_size_mb:64", "roundup_power2_divisions:4")]
    assert len(calls) == 2            # the default rounding once, power-of-2 divisions once
    fresh = gml.replay(snap.snapshot, alloc_conf="roundup_power2_divisions:4",
                       total_memory=256 * MiB)      # a dict: a new Snapshot, scanned anew
    assert len(calls) == 3 and _figures(fresh) == _figures(again[-1])
    assert first.address_mismatches == 0
