"""gpumemlab report | verify | replay on snapshot files: output, exit status, one-line errors."""
import pickle
from pathlib import Path

import pytest

from gpumemlab.cli import main

FIX = Path(__file__).parents[1] / "fixtures" / "snapshots"
FRAG = str(FIX / "sim_fragmentation_oom.pickle")
TRAIN = str(FIX / "sim_train_step_like.pickle")


def test_report_shows_summary_blockmap_and_largest_allocations(capsys):
    assert main(["report", FRAG, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "reserved 3.50 GiB, allocated 1.75 GiB" in out
    assert "largest live allocations (top 2)" in out
    assert out.count("256.00 MiB  requested    268435456") == 2
    assert "make_fixtures.py" in out or "scenarios.py" in out     # frames of the allocation


def test_report_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "map.png"
    assert main(["report", FRAG, "--png", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("path", [FRAG, TRAIN])
def test_verify_reproduces_fixtures(path, capsys):
    assert main(["verify", path]) == 0
    out = capsys.readouterr().out
    assert "0 mismatches" in out and "verified" in out


def test_verify_fails_on_a_doctored_recording(tmp_path, capsys):
    snap = pickle.loads(Path(TRAIN).read_bytes())
    trace = snap["device_traces"][0]
    k = max(i for i, e in enumerate(trace) if e["action"] == "alloc")
    trace[k]["addr"] += 1024
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps(snap))
    assert main(["verify", str(bad)]) == 1
    assert "NOT verified" in capsys.readouterr().out


def test_replay_table_has_a_row_per_setting(capsys):
    assert main(["replay", FRAG, "--alloc-conf", "expandable_segments:True",
                 "--total-memory", "4GiB", "--total-memory", "8GiB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 4
    assert rows[0][0] == "recorded" and rows[0][-2] == "yes"        # 4 GiB: the recorded OOM
    assert rows[1][0] == "expandable_segments:True" and rows[1][-2] == "no"
    assert rows[2][-2] == "no"                                       # 8 GiB: fits as recorded


@pytest.mark.parametrize("payload, words", [
    (None, "no such file"),
    (b"\x80\x04K\x01", "truncated"),
    (b"garbage", "not a memory snapshot"),
    (pickle.dumps({"segments": []}), "no trace"),
])
def test_errors_are_one_line(tmp_path, capsys, payload, words):
    path = tmp_path / "x.pickle"
    if payload is not None:
        path.write_bytes(payload)
    status = main(["verify", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if "error:" in line]
    assert status == 2 and len(errors) == 1 and words in errors[0] and str(path) in errors[0]
    assert not any("Traceback" in line for line in err)


def test_bad_alloc_conf_is_one_line(capsys):
    assert main(["replay", FRAG, "--alloc-conf", "nonsense_option:3"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nonsense_option" in err


def _dump(tmp_path, snap, name="s.pickle"):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(snap))
    return str(path)


def test_verify_is_honest_when_nothing_is_checked(tmp_path, capsys):
    # one leftover free_completed: no allocation, so nothing was reproduced
    only_free = {"segments": [], "device_traces": [[
        {"action": "free_completed", "addr": 1 << 30, "size": 512, "stream": 0, "time_us": 1}]]}
    assert main(["verify", _dump(tmp_path, only_free)]) == 1
    out = capsys.readouterr().out
    assert "nothing checked" in out and "NOT verified" in out and "verified: every" not in out
    # --device 1 of a file whose device-1 trace is empty
    snap = pickle.loads(Path(TRAIN).read_bytes())
    snap["device_traces"].append([])
    assert main(["verify", _dump(tmp_path, snap), "--device", "1"]) == 1
    assert "nothing checked" in capsys.readouterr().out


@pytest.mark.parametrize("edit, words", [
    (lambda s: s["segments"].append(dict(s["segments"][0])), "duplicates segment 0"),
    (lambda s: s["segments"].append(dict(s["segments"][0], address=s["segments"][0]["address"]
                                         + 2 * 1024 * 1024, blocks=[
        dict(b, address=b["address"] + 2 * 1024 * 1024) for b in s["segments"][0]["blocks"]])),
     "overlaps segment 0"),
    (lambda s: s["segments"][0].update(device="0"), "segment 0: 'device' is str"),
    (lambda s: s["segments"][0].update(stream=1.5), "segment 0: 'stream' is float"),
    (lambda s: s["segments"][0].update(is_expandable="yes"), "'is_expandable' is str"),
    (lambda s: s["device_traces"][0][3].update(size="12"), "device_traces[0][3]"),
])
def test_verify_names_file_and_entry_of_a_malformed_snapshot(tmp_path, capsys, edit, words):
    snap = pickle.loads(Path(FRAG).read_bytes())
    edit(snap)
    path = _dump(tmp_path, snap, "bad.pickle")
    assert main(["verify", path]) == 2
    err = capsys.readouterr().err
    assert words in err and path in err and "verified" not in err


CPP_STACK = [  # innermost first, as a recording with context="all", stacks="all" stores them
    {"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
    {"filename": "/pytorch/torch/csrc/profiler/combined_traceback.cpp", "line": 79,
     "name": "torch::CapturedTraceback::gather(bool, bool, bool)"},
    {"filename": "/pytorch/torch/csrc/cuda/memory_snapshot.cpp", "line": 169,
     "name": "torch::cuda::gather_with_cpp()"},
    {"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 1266,
     "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"},
    {"filename": "/pytorch/aten/src/ATen/native/TensorFactories.cpp", "line": 45,
     "name": "at::native::empty_cuda"},
    {"filename": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "line": 125,
     "name": "forward"},
    {"filename": "/home/me/train.py", "line": 41, "name": "train_step"},
    {"filename": "/home/me/train.py", "line": 88, "name": "<module>"},
]


def test_culprit_frames_skip_pytorchs_own_code():
    from gpumemlab.viz.frames import culprit_frame, frame_text
    assert frame_text(CPP_STACK) == "/home/me/train.py:41 train_step"
    no_user = CPP_STACK[:6]
    assert culprit_frame(no_user)["name"] == "forward"           # PyTorch's Python frame next
    cpp_only = CPP_STACK[:5]
    assert culprit_frame(cpp_only)["name"] == "at::native::empty_cuda"   # C++ only when alone
    assert frame_text([]) == "(no frames recorded)"


def test_report_names_user_code_and_reads_a_range(tmp_path, capsys):
    snap = pickle.loads(Path(TRAIN).read_bytes())
    # the biggest live block gets a stack recorded with C++ frames
    biggest = max((b for s in snap["segments"] for b in s["blocks"]
                   if b["state"] == "active_allocated"), key=lambda b: (b["size"], -b["address"]))
    biggest["frames"] = CPP_STACK
    path = tmp_path / "cpp.pickle"
    path.write_bytes(pickle.dumps(snap))
    assert main(["report", str(path), "--top", "1", "--range", "100:160"]) == 0
    out = capsys.readouterr().out
    assert "train.py:41 train_step" in out and "memory_snapshot.cpp" not in out
    assert "trace entries 100:160 of 263" in out and "peak reserved" in out
    assert "largest allocations made in the range" in out
    assert main(["report", str(path), "--range", "oops"]) == 2
    assert "expected START:END" in capsys.readouterr().err
