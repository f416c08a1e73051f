"""Stack frames recorded by the simulated GPU: the same frames the traceback-based capture gave
(at every depth, both sides of its 20-frame window), captured only when the allocator keeps
them, and fresh frame dicts in every snapshot."""
from __future__ import annotations

import sys
import traceback

import pytest

import gpumemlab as gml
from gpumemlab.allocator import frames as frames_mod
from gpumemlab.devices import simulated


def traceback_capture(skip_prefix, limit=12, depth=0):
    """The former capture, from traceback.extract_stack (file system, source lines): the
    ``limit + 8`` innermost frames counted from the capturing function's own (here the caller's
    frame, since this oracle is not under ``skip_prefix``), outside ``skip_prefix``. It looks at
    every frame: ``depth`` (the callers' count of their own frames to skip) is ignored, so the
    comparison checks that skipping them changes nothing."""
    out = []
    for fs in reversed(traceback.extract_stack(f=sys._getframe(1), limit=limit + 7)):
        if fs.filename.startswith(skip_prefix):
            continue
        out.append({"filename": fs.filename, "line": fs.lineno or 0, "name": fs.name})
        if len(out) >= limit:
            break
    return out


def _at_depth(depth, fn, *args):
    if depth > 0:
        return _at_depth(depth - 1, fn, *args)
    return fn(*args)


def _workload(max_depth):
    gpu = gml.SimulatedGPU("1GiB")
    for depth in range(max_depth):
        a = _at_depth(depth, gpu.empty, 1000 + depth)
        b = _at_depth(depth, gpu.empty, (depth + 2) * 1024 * 1024)
        _at_depth(depth, a.free)
        if depth % 5 == 0:
            _at_depth(depth, gpu.empty_cache)
        del b
    return gpu.snapshot()


def test_frames_identical_to_traceback_capture_at_every_depth(monkeypatch):
    snaps = []
    for capture in (traceback_capture, frames_mod.capture):
        monkeypatch.setattr(simulated, "_capture_frames", capture)
        snaps.append(_workload(30))
    old, new = snaps
    assert new == old
    depths = {len(e["frames"]) for e in new["device_traces"][0] if "frames" in e}
    assert depths.issuperset({12})  # deep calls fill the limit
    shallow = [e for e in new["device_traces"][0] if e.get("frames")]
    assert all(f["filename"] != simulated.__file__ for e in shallow for f in e["frames"])


def test_no_frames_are_captured_when_nothing_keeps_them(monkeypatch):
    calls = []
    real = simulated._capture_frames
    monkeypatch.setattr(simulated, "_capture_frames", lambda *a: calls.append(a) or real(*a))
    gpu = gml.SimulatedGPU("1GiB", record_history=False)
    gpu.empty(4096).free()
    gpu.empty_cache()
    assert calls == []
    gpu.record_memory_history("all", context="state")  # state: frames kept on malloc only
    gpu.empty(4096).free()
    assert len(calls) == 1
    gpu.record_memory_history("all")
    gpu.empty(4096).free()
    assert len(calls) == 3


def test_every_snapshot_gets_its_own_frame_objects():
    gpu = gml.SimulatedGPU("1GiB")
    keep = [gpu.empty(4096), gpu.empty(4096)]
    first, second = gpu.snapshot(), gpu.snapshot()
    entry = first["device_traces"][0][0]
    entry["frames"][0]["name"] = "edited"
    first["segments"][0]["blocks"][0]["frames"].clear()
    assert second["device_traces"][0][0]["frames"][0]["name"] != "edited"
    assert second["segments"][0]["blocks"][0]["frames"]
    third = gpu.snapshot()
    assert third["device_traces"][0][0] == second["device_traces"][0][0]
    assert third["segments"] == second["segments"]
    del keep


def test_one_call_site_shares_one_frames_object():
    gpu = gml.SimulatedGPU("1GiB")
    blocks = []
    for _ in range(3):
        blocks.append(gpu.empty(4096))
    contexts = {id(a._block.context_when_allocated) for a in blocks}
    assert len(contexts) == 1
    frames = blocks[0]._block.context_when_allocated
    assert frames_mod.is_captured(frames)
    assert frames_mod.frame_dicts(frames)[0]["name"] == "test_one_call_site_shares_one_frames_object"
    assert frames_mod.frame_dicts(None) == [] and frames_mod.frame_dicts(()) == []


def test_frame_dicts_copies_plain_frame_lists():
    given = [{"filename": "x.py", "line": 3, "name": "f"}]
    out = frames_mod.frame_dicts(given)
    assert out == given and out[0] is not given[0]


@pytest.mark.parametrize("limit", [1, 3, 12])
def test_capture_limit(limit):
    got = _at_depth(20, frames_mod.capture, "/nonexistent-prefix/", limit)
    assert len(got) == 2 * limit
    assert frames_mod.frame_dicts(got)[0]["name"] == "capture"
