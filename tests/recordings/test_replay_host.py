"""gml.replay(snap, host=True): a recording's host_traces on the pinned host allocator model.

Two sources: the simulator's own recording (SimulatedGPU(record_pinned_host_memory=True)), and a
hand-made one in the shape 2.14 writes as far as it could be read (top-level ``host_segments`` /
``host_traces``, named in torch/cuda/memory.py after pytorch/pytorch#182407; the entries are the
device entries' fields, which that PR's host recorder reuses), with real-looking cudaHostAlloc
addresses the model's own address bump would never give.
"""
import pytest

from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.recordings.files import normalize_snapshot
from gpumemlab.recordings.replay import HostReplayResult, ReplayError, replay

MiB = 1 << 20


def _simulated_recording():
    gpu = SimulatedGPU("1GiB", record_pinned_host_memory=True)
    a, b = gpu.pin(3 * MiB), gpu.pin(3 * MiB)          # one bucket (4 MiB)
    dev = gpu.empty(4 * MiB)
    gpu.copy_(dev, b, non_blocking=True)              # b waits for the copy after free
    a.free()
    b.free()                                          # freed last, but still held: a replay
    c = gpu.pin(3 * MiB)                              # that cached it at free_requested would
    gpu.synchronize()
    d = gpu.pin(3 * MiB)                              # hand b to c; c gets a, d gets b
    big = gpu.pin(20 * MiB)
    big.free()
    gpu.host_empty_cache()                            # gives the 32 MiB block back
    keep = [c, d, dev]
    return gpu.snapshot(), keep


def _entry(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": [{"filename": "train.py", "line": 12, "name": "step"}]}


def _block(addr, size, state, requested=None):
    return {"address": addr, "size": size, "state": state,
            "requested_size": size if requested is None else requested, "frames": []}


def _segment(addr, size, blocks):
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": -1, "address": addr, "total_size": size, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": active, "requested_size": active, "frames": [], "blocks": blocks}


A, B, C = 0x7F3A_4C00_0000, 0x7F3A_5400_0000, 0x7F3A_6000_0000


def _hand_made(reuse_addr=B):
    """Three 8 MiB pins; free A then B; a pin reuses the last freed (B); then empty cache."""
    t = iter(range(1_700_000_000_000_000, 1_800_000_000_000_000, 37))
    trace = []
    for addr in (A, B, C):
        trace += [_entry("segment_alloc", addr, 8 * MiB, next(t)),
                  _entry("alloc", addr, 8 * MiB, next(t))]
    for addr in (A, B):
        trace += [_entry("free_requested", addr, 8 * MiB, next(t)),
                  _entry("free_completed", addr, 8 * MiB, next(t))]
    trace += [_entry("alloc", reuse_addr, 8 * MiB, next(t))]
    other = A if reuse_addr == B else B
    trace += [_entry("segment_free", other, 8 * MiB, next(t))]
    segments = [_segment(addr, 8 * MiB, [_block(addr, 8 * MiB, "active_allocated")])
                for addr in sorted((reuse_addr, C))]
    return {"segments": [], "device_traces": [[]], "host_segments": segments,
            "host_traces": trace, "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def test_the_simulators_recording_replays_at_its_addresses():
    snap, _ = _simulated_recording()
    r = replay(snap, host=True)
    assert isinstance(r, HostReplayResult) and r.faithful
    assert r.address_mismatches == 0 and r.final_state_matches is True
    assert r.allocations == 5 and r.replayed == r.entries == len(snap["host_traces"])
    assert r.start_blocks == 0 and r.new_blocks == 3     # a, b, big; c and d reuse
    assert r.peak_pinned_bytes == 4 * MiB * 2 + 32 * MiB


def test_real_looking_addresses_are_reproduced():
    r = replay(_hand_made(), host=True)
    assert r.address_mismatches == 0 and r.first_mismatch is None
    assert r.final_state_matches is True
    assert sorted(r.allocator.blocks) == [B, C]


def test_a_recording_the_model_cannot_reproduce_is_a_mismatch():
    # the recorded pin reused A, first freed: c10's free list gives the last freed (B)
    r = replay(_hand_made(reuse_addr=A), host=True)
    assert r.address_mismatches == 2                # the alloc, and B's segment_free (in use)
    assert r.first_mismatch[1:] == (A, B)
    assert r.final_state_matches is False
    assert "address mismatches (first at entry" in r.summary()


def test_a_trace_that_begins_mid_run_rebuilds_the_blocks_alive_before_it():
    snap = _hand_made()
    snap["host_traces"] = snap["host_traces"][6:]        # the three pins fell off the ring
    r = replay(snap, host=True)
    assert r.start_blocks == 3 and any("before the host trace began" in n for n in r.notes)
    assert r.address_mismatches == 0 and r.final_state_matches is True


def test_what_if_a_round_threshold_pins_less():
    snap, _ = _simulated_recording()
    base = replay(snap, host=True)
    r = replay(snap, "pinned_max_round_threshold_mb:2", host=True)
    assert not r.faithful and r.address_mismatches is None and r.final_state_matches is None
    assert r.peak_pinned_bytes == 3 * MiB * 2 + 20 * MiB < base.peak_pinned_bytes


def test_an_oom_and_an_unknown_action_in_the_host_trace_are_read_and_passed_over():
    snap = _hand_made()
    snap["host_traces"].insert(3, {"action": "oom", "device_free": 0, "size": 1 << 40,
                                   "stream": 0, "time_us": 1})
    snap["host_traces"].insert(4, {"action": "pinned_something_new", "stream": 0})
    norm, _ = normalize_snapshot(snap)
    assert len(norm["host_traces"]) == len(snap["host_traces"])     # kept, not a note
    assert replay(norm, host=True).address_mismatches == 0


def test_no_host_trace_and_device_only_options_say_so():
    with pytest.raises(ReplayError, match="record_pinned_host_memory=True"):
        replay(SimulatedGPU("1GiB").snapshot(), host=True)
    snap, _ = _simulated_recording()
    with pytest.raises(ReplayError, match="gpu would be ignored"):
        replay(snap, host=True, gpu=SimulatedGPU("1GiB"))


@pytest.mark.parametrize("conf", ["", "pinned_reserve_segment_size_mb:64",
                                  "pinned_max_cached_size_mb:8"])
def test_every_cut_of_the_ring_still_replays_at_the_recorded_addresses(conf):
    """A ring buffer that dropped the first k host entries, for every k: reserve carves (no pin
    of their own, the reserve's fill level read from the carves), blocks too big to cache
    (a reuse without a pin is then a pin that fell off), a block held by a copy's event."""
    gpu = SimulatedGPU("1GiB", alloc_conf=conf, record_pinned_host_memory=True)
    keep = [gpu.pin(3 * MiB), gpu.pin(5000), gpu.pin(20 * MiB)]
    keep[0].free()
    keep[2].free()
    keep += [gpu.pin(2 * MiB)]
    gpu.host_empty_cache()
    keep += [gpu.pin(9 * MiB), gpu.pin(MiB), gpu.empty(MiB)]
    gpu.copy_(keep[-1], keep[-2], non_blocking=True)
    keep[-2].free()
    keep += [gpu.pin(MiB)]
    gpu.synchronize()
    keep += [gpu.pin(MiB)]
    snap = gpu.snapshot()
    results = []
    for cut in range(len(snap["host_traces"])):
        cut_snap = dict(snap, host_traces=snap["host_traces"][cut:])
        r = replay(cut_snap, host=True)
        results.append((cut, r.address_mismatches, r.final_state_matches))
    assert results == [(cut, 0, True) for cut in range(len(snap["host_traces"]))]


def test_gpumemlab_verify_host_exits_0_only_when_every_host_address_is_reproduced(tmp_path,
                                                                                   capsys):
    import json

    from gpumemlab.cli import main
    from gpumemlab.recordings.files import dump_snapshot

    good, bad = tmp_path / "good.pickle", tmp_path / "bad.pickle"
    dump_snapshot(_hand_made(), good)
    dump_snapshot(_hand_made(reuse_addr=A), bad)
    assert main(["verify", str(good), "--host"]) == 0
    assert "verified: every host address reproduced" in capsys.readouterr().out
    assert main(["verify", str(bad), "--host"]) == 1
    assert "NOT verified" in capsys.readouterr().out
    assert main(["verify", str(bad), "--host", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verified"] is False and out["host"]["address_mismatches"] == 2
