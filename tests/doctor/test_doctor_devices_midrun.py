"""The doctor on snapshots as real runs make them: several devices (the OOM on a second one, a
device without a trace), recordings that begin mid-run on a smaller card (live vs cached at the
start, the cache released as c10's release_cached_blocks does, fixes that agree with the
headline), culprit frames past the interpreter's own files, and decimal card sizes."""
import json
import subprocess
import sys

import pytest

import gpumemlab as gml
from gpumemlab.doctor.fixes import _env
from gpumemlab.recordings.files import dump_snapshot

MiB, GiB = 1 << 20, 1 << 30


def _device_run(d, total, oom):
    gpu = gml.SimulatedGPU(total, alloc_conf="", device_index=d, record_frames=False)
    keep = [gpu.empty(100 * MiB) for _ in range(3)]
    keep[1].free()
    if oom:
        with pytest.raises(gml.OutOfMemoryError):
            gpu.empty(2 * GiB)
    return gpu.snapshot()


def _merge(snaps, traced=(0, 1, 2)):
    """One snapshot of several devices, as torch.cuda.memory._snapshot() makes it."""
    out = {"segments": [], "device_traces": [[] for _ in snaps],
           "allocator_settings": snaps[0]["allocator_settings"]}
    for d, s in enumerate(snaps):
        out["segments"] += [seg for seg in s["segments"] if seg["device"] == d]
        if d in traced:
            out["device_traces"][d] = s["device_traces"][d]
    return out


def test_the_device_that_ran_out_is_chosen_and_every_device_is_listed():
    snap = _merge([_device_run(0, "1GiB", False), _device_run(1, "1GiB", True),
                   _device_run(2, "1GiB", False)])
    d = gml.doctor(snap, search=False)
    assert d.device == 1 and d.kind == "exhaustion" and d.details["recorded_oom"]
    rows = d.details["devices"]
    assert [r["device"] for r in rows] == [0, 1, 2]
    assert [r["chosen"] for r in rows] == [False, True, False]
    assert rows[1]["recorded_oom_entry"] == d.details["oom_entry"]
    assert rows[0]["recorded_oom_entry"] is None and rows[2]["recorded_oom_entry"] is None
    assert "devices looked at (3)" in str(d) and "GPU 1: recorded OOM" in str(d)
    out = json.loads(d.json())
    assert out["device"] == 1 and len(out["details"]["devices"]) == 3


def test_without_a_recorded_oom_the_first_device_to_fail_on_the_card_is_chosen():
    big = _device_run(2, "4GiB", False)
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="", device_index=2, record_frames=False)
    keep = [gpu.empty(500 * MiB) for _ in range(4)]            # 2000 MiB live on device 2
    big = gpu.snapshot()
    snap = _merge([_device_run(0, "4GiB", False), _device_run(1, "4GiB", False), big])
    d = gml.doctor(snap, total_memory="1GiB", search=False)
    assert d.device == 2 and d.kind == "exhaustion"
    rows = d.details["devices"]
    assert [r["replayed_oom_entry"] is not None for r in rows] == [False, False, True]
    assert "first to run out" in rows[2]["why"]
    del keep


def test_a_device_without_a_trace_gets_a_state_only_diagnosis():
    snap = _merge([_device_run(0, "1GiB", False), _device_run(1, "1GiB", True)], traced=(1,))
    d = gml.doctor(snap, search=False, request="50MiB")
    assert d.device == 1
    row0 = d.details["devices"][0]
    assert not row0["has_trace"] and row0["state_kind"] == "no_oom"    # 100 MiB block is free
    assert "fits now" in row0["state_summary"]
    # no device has a trace: one state-only diagnosis per device
    snap = _merge([_device_run(0, "1GiB", False), _device_run(1, "1GiB", False)], traced=())
    d = gml.doctor(snap, request="300MiB", total_memory="250MiB")
    rows = d.details["devices"]
    assert [r["device"] for r in rows] == [0, 1] and all(r["state_kind"] for r in rows)
    assert any("no trace" in c for c in d.cannot_tell)
    assert json.loads(d.json())["kind"] != "null"
    assert gml.doctor(snap).as_dict()["kind"] == "unknown"                # never null
    with pytest.raises(ValueError, match="no device 7"):
        gml.doctor(snap, device=7)


def _midrun(cached_whole=4, pinned=6, live_whole=2):
    """A run that began long before recording: ``pinned`` 1 GiB segments each holding one live
    200 MiB block (824 MiB free in them), ``cached_whole`` wholly free 1 GiB segments and
    ``live_whole`` live 1 GiB blocks; the recording then asks for 900 MiB blocks."""
    gpu = gml.SimulatedGPU("16GiB", alloc_conf="", record_frames=False)
    whole = [gpu.empty(1 * GiB) for _ in range(live_whole)]
    segs = [gpu.empty(1 * GiB) for _ in range(pinned + cached_whole)]
    small, fillers = [], []
    for s in segs[:pinned]:            # one free segment at a time: best fit splits that one
        s.free()
        small.append(gpu.empty(200 * MiB))
        fillers.append(gpu.empty(1 * GiB - 200 * MiB))
    for s in fillers + segs[pinned:]:
        s.free()
    gpu.allocator.alloc_buffer.clear()                             # recording begins here
    for _step in range(3):
        xs = [gpu.empty(900 * MiB) for _ in range(3)]
        for x in xs:
            x.free()
    return gpu.snapshot(), (whole, small)


def test_midrun_recording_on_a_smaller_card_releases_the_cache_as_c10_does():
    snap, keep = _midrun()
    live = 2 * GiB + 6 * 200 * MiB
    r = gml.replay(snap, total_memory="9GiB")
    t = r.start_trim
    assert t["live_bytes"] == live and t["cached_bytes"] == 12 * GiB - live
    assert t["released_bytes"] == 4 * GiB and t["outcome"] == "cache released"
    assert t["reserved_after_bytes"] == 8 * GiB and r.faithful
    # no start-state OOM: the run goes on and runs out at a 900 MiB request
    assert r.oom is not None and r.oom["index"] > 0 and r.oom.get("during") is None
    d = gml.doctor(snap, total_memory="9GiB")
    assert d.kind == "fragmentation" and d.requested_bytes == 900 * MiB
    assert d.allocated_bytes + d.requested_bytes <= 9 * GiB
    assert "releases that cache" in d.summary and "cannot start" not in d.summary
    assert d.details["start_state"]["released_bytes"] == 4 * GiB
    _fixes_agree_with_the_headline(snap, d)
    del keep


def _fixes_agree_with_the_headline(snap, d):
    fitting = [f for f in d.fixes if f.alloc_conf and f.fits]
    for f in d.fixes:
        if f.fits and f.verified:
            conf = _env(d.details["alloc_conf"], f.alloc_conf) if f.alloc_conf else ""
            again = gml.replay(snap, alloc_conf=conf, total_memory=f.total_memory_bytes)
            assert again.oom is None, f.name
    if d.kind == "exhaustion":
        assert not fitting
    peak = gml.replay(snap, alloc_conf=d.details["alloc_conf"],
                      total_memory=1 << 42).peak_allocated
    share = d.details["allocator_share_bytes"]
    if share is not None and peak <= share:
        assert d.kind != "exhaustion"
    if fitting:
        assert d.recommended is not None and "recommended (*)" in str(d)


def test_midrun_whose_live_layout_does_not_fit_goes_on_as_a_what_if():
    snap, keep = _midrun(cached_whole=0, pinned=8, live_whole=0)   # 8 GiB of pinned segments
    r = gml.replay(snap, total_memory="6GiB")
    assert r.start_trim["outcome"].startswith("layout does not fit") and not r.faithful
    assert r.oom is None                                  # 1.6 GiB live + 2.7 GiB fit 6 GiB
    d = gml.doctor(snap, total_memory="6GiB")
    assert d.kind == "no_oom" and "releases that cache" in d.summary
    del keep


def test_midrun_whose_live_bytes_do_not_fit_is_exhaustion_without_a_request():
    snap, keep = _midrun()
    d = gml.doctor(snap, total_memory="3GiB")
    assert d.kind == "exhaustion" and d.requested_bytes is None
    assert d.details["oom_during"] == "start state"
    assert d.allocated_bytes == 2 * GiB + 6 * 200 * MiB
    assert d.details["shortfall_bytes"] == d.allocated_bytes - 3 * GiB
    assert "was live" in d.summary and "Tried" not in d.summary
    assert json.loads(d.json())["requested_bytes"] is None
    del keep


def test_total_memory_accepts_decimals_as_pytorch_prints_them(tmp_path):
    snap, keep = _midrun()
    path = dump_snapshot(snap, tmp_path / "midrun.pickle")
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", str(path),
                          "--total-memory", "9.5GiB", "--no-search", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["total_bytes"] == 9 * GiB + GiB // 2
    assert gml.doctor(snap, total_memory="79.33GiB", search=False).total_bytes == \
        int(79.33 * 100) * GiB // 100
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", str(path),
                          "--total-memory", "lots", "--no-search"], capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    del keep


CPYTHON_STACK = [   # innermost first, as a recording with C++ and Python stacks stores it
    {"filename": "??", "name": "??", "line": 0},
    {"filename": "Python/ceval.c", "name": "_PyEval_EvalFrameDefault", "line": 4769},
    {"filename": "Objects/call.c", "name": "PyObject_Call", "line": 355},
    {"filename": "<frozen importlib._bootstrap>", "name": "_call_with_frames_removed", "line": 241},
    {"filename": "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
     "name": "forward", "line": 116},
    {"filename": "/home/me/train.py", "name": "step", "line": 12},
]


def test_culprit_frames_skip_the_interpreters_own_files():
    from gpumemlab.doctor.growth.result import where
    from gpumemlab.viz.frames import culprit_frame, frame_text
    assert frame_text(CPYTHON_STACK) == "/home/me/train.py:12 step"
    assert culprit_frame(CPYTHON_STACK[:5])["name"] == "forward"     # PyTorch's Python next
    assert culprit_frame(CPYTHON_STACK[:4]) is None                  # nothing but the interpreter
    cpp = [{"filename": "aten/src/ATen/native/TensorFactories.cpp", "name": "at::native::empty",
            "line": 3}] + CPYTHON_STACK[:4]
    assert culprit_frame(cpp)["name"] == "at::native::empty"
    assert where(CPYTHON_STACK).startswith("train.py:12 in step (via torch/nn/modules/linear.py")


def test_an_exhaustion_headline_never_stands_beside_a_setting_that_fits():
    from gpumemlab.doctor.diagnosis import Diagnosis, Fix
    from gpumemlab.doctor.fixes import reconcile
    d = Diagnosis(mode="snapshot", source="s", kind="exhaustion", summary="", requested_bytes=1)
    d.fixes = [Fix("max_split_size_mb:64", "", alloc_conf="max_split_size_mb:64", fits=False,
                   verified=True)]
    reconcile(d)
    assert d.kind == "exhaustion" and not d.notes                 # nothing fits: it stands
    d.fixes.append(Fix("expandable_segments", "", alloc_conf="expandable_segments:True",
                       fits=True, verified=True))
    reconcile(d)
    assert d.kind == "fragmentation" and "expandable_segments replays" in d.notes[0]


def test_parse_size_rounds_a_printed_decimal_down_only_when_asked():
    from gpumemlab.units import parse_size
    assert parse_size("79.33GiB", round_down=True) == 7933 * GiB // 100
    assert parse_size("1.5KiB") == 1536                            # whole bytes: as before
    with pytest.raises(ValueError, match="whole number of bytes"):
        parse_size("79.33GiB")
