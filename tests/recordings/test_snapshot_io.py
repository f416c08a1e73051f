"""Snapshot files: safe loading of pickles and JSON, layout normalisation, dumps PyTorch reads."""
import json
import pickle
import subprocess
import sys
import warnings

import pytest

from gpumemlab.recordings.files import (SnapshotError, SnapshotWarning, dump_snapshot, load_snapshot,
                                   loads_snapshot, normalize_snapshot)

MiB = 1024 * 1024
FRAME = {"filename": "train.py", "line": 12, "name": "forward"}


def small_snapshot():
    """A 2 MiB small segment with one 512 B block live, as after torch.empty(1) (§10 fact 1)."""
    base = 0x7F0000000000
    blocks = [
        {"address": base, "size": 512, "requested_size": 1, "state": "active_allocated",
         "frames": [FRAME]},
        {"address": base + 512, "size": 2 * MiB - 512, "requested_size": 0, "state": "inactive",
         "frames": []},
    ]
    seg = {"device": 0, "address": base, "total_size": 2 * MiB, "allocated_size": 512,
           "active_size": 512, "requested_size": 1, "stream": 0, "segment_type": "small",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}
    trace = [
        {"action": "segment_alloc", "addr": base, "size": 2 * MiB, "stream": 0, "time_us": 1,
         "frames": [FRAME]},
        {"action": "alloc", "addr": base, "size": 1, "stream": 0, "time_us": 2, "frames": [FRAME]},
    ]
    return {"segments": [seg], "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
            "external_annotations": []}


def test_pickle_round_trip_is_exact(tmp_path):
    snap = small_snapshot()
    path = dump_snapshot(snap, tmp_path / "s.pickle")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_snapshot(path) == snap


def test_json_round_trip_restores_tuples(tmp_path):
    snap = small_snapshot()
    path = dump_snapshot(snap, tmp_path / "s.json")
    assert path.read_bytes().startswith(b"{")
    back = load_snapshot(path)
    assert back["segments"][0]["segment_pool_id"] == (0, 0)
    assert back == snap


def test_dump_accepts_objects_with_snapshot_method(tmp_path):
    class Dev:
        def snapshot(self):
            return small_snapshot()
    assert load_snapshot(dump_snapshot(Dev(), tmp_path / "d.pickle")) == small_snapshot()


def test_torch_memory_viz_reads_our_dump(tmp_path):
    path = dump_snapshot(small_snapshot(), tmp_path / "s.pickle")
    for action in ("stats", "trace"):
        proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", action, str(path)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        if action == "stats":
            assert "segments: 1" in proc.stdout and "total_reserved: 2.0MiB" in proc.stdout
        else:
            assert "2 entries" in proc.stdout and "cudaMalloc" in proc.stdout


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize("payload, words", [
    (pickle.dumps({"segments": [], "x": Evil()}), "builtins.print"),
    (pickle.dumps({"segments": [], "x": OSError}), "builtins.OSError"),
    (pickle.dumps({"segments": []}) [:-1] + b"Q.", "persistent"),
    (b"cos\nsystem\n(S'echo hi'\ntR.", "os.system"),
])
def test_hostile_pickles_are_refused_without_running(tmp_path, payload, words, capsys):
    path = tmp_path / "evil.pickle"
    path.write_bytes(payload)
    with pytest.raises(SnapshotError) as err:
        load_snapshot(path)
    assert str(path) in str(err.value) and words in str(err.value)
    assert "pwned" not in capsys.readouterr().out


def test_truncated_empty_wrong_type_and_missing(tmp_path):
    good = pickle.dumps(small_snapshot())
    cases = {"trunc.pickle": (good[: len(good) // 2], "truncated"),
             "empty.pickle": (b"", "empty"),
             "text.pickle": (b"hello world", "not a memory snapshot"),
             "list.pickle": (pickle.dumps(42), "got int"),
             "nosegs.json": (b'{"a": 1}', "no 'segments'"),
             "bad.json": (b'{"segments": [', "malformed JSON"),
             "gz.pickle": (b"\x1f\x8b\x08\x00rest", "gzip")}
    for name, (payload, words) in cases.items():
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(SnapshotError, match=words) as err:
            load_snapshot(tmp_path / name)
        assert name in str(err.value)
    with pytest.raises(SnapshotError, match="no such file"):
        load_snapshot(tmp_path / "absent.pickle")
    with pytest.raises(SnapshotError, match="directory"):
        load_snapshot(tmp_path)
    with pytest.raises(SnapshotError, match="limit"):
        load_snapshot(tmp_path / "list.pickle", max_bytes=3)


def test_shared_reference_bomb_is_refused_quickly():
    block = {"size": 512, "state": "inactive"}
    blocks = [block] * 20000
    seg = {"address": 0, "blocks": blocks}
    data = pickle.dumps({"segments": [seg] * 20000})   # small file, 4e8 block visits
    assert len(data) < 200_000
    with pytest.raises(SnapshotError, match="crafted"):
        loads_snapshot(data, name="bomb.pickle")


def test_malformed_fields_name_the_place():
    snap = small_snapshot()
    snap["segments"][0]["blocks"][1]["size"] = "big"
    with pytest.raises(SnapshotError, match=r"segment 0, block 1: 'size' is str"):
        normalize_snapshot(snap, source="f.pickle")
    snap = small_snapshot()
    snap["segments"][0]["total_size"] = 4 * MiB
    with pytest.raises(SnapshotError, match="add up to 2097152"):
        normalize_snapshot(snap)
    snap = small_snapshot()
    snap["device_traces"][0][1].pop("addr")
    with pytest.raises(SnapshotError, match=r"device_traces\[0\]\[1\] \(alloc\): missing 'addr'"):
        normalize_snapshot(snap)
    snap = small_snapshot()
    snap["segments"][0]["blocks"][0]["state"] = "weird"
    with pytest.raises(SnapshotError, match="unknown state 'weird'"):
        normalize_snapshot(snap)


def test_old_layouts_get_defaults_and_a_warning(tmp_path):
    """A PyTorch 2.0-style file: history blocks, no settings, no time_us, no block addresses."""
    old = {"segments": [{"address": 4096, "total_size": 2 * MiB, "stream": 0,
                         "segment_type": "small", "allocated_size": 1024, "active_size": 1024,
                         "blocks": [
                             {"size": 1024, "state": "active_allocated",
                              "history": [{"addr": 4096, "real_size": 1000, "frames": [FRAME]}]},
                             {"size": 2 * MiB - 1024, "state": "inactive"}]}],
           "device_traces": [[{"action": "alloc", "addr": 4096, "size": 1000}]]}
    path = tmp_path / "old.pickle"
    path.write_bytes(pickle.dumps(old, protocol=2))
    with pytest.warns(SnapshotWarning, match="history") as rec:
        snap = load_snapshot(path)
    assert "allocator_settings" in str(rec[0].message)
    seg = snap["segments"][0]
    assert [b["address"] for b in seg["blocks"]] == [4096, 5120]
    assert seg["blocks"][0]["requested_size"] == 1000 and seg["blocks"][0]["frames"] == [FRAME]
    assert seg["requested_size"] == 1000 and seg["segment_pool_id"] == (0, 0)
    assert snap["device_traces"][0][0]["time_us"] == 0
    assert "history" not in seg["blocks"][0]
    assert old["device_traces"][0][0].get("time_us") is None   # input untouched


def test_bare_segment_list_and_missing_traces():
    segs = small_snapshot()["segments"]
    snap, notes = normalize_snapshot(segs)
    assert snap["device_traces"] == [] and any("bare segment list" in n for n in notes)
    snap, notes = normalize_snapshot({"segments": segs})
    assert any("no 'device_traces'" in n for n in notes)


def test_pending_free_alias_and_segment_type_inference():
    snap = small_snapshot()
    seg = snap["segments"][0]
    seg["blocks"][0]["state"] = "active_awaiting_free"
    del seg["segment_type"]
    out, _ = normalize_snapshot(snap)
    assert out["segments"][0]["blocks"][0]["state"] == "active_pending_free"
    assert out["segments"][0]["segment_type"] == "small"


def test_json_list_of_segments_file(tmp_path):
    path = tmp_path / "segs.json"
    path.write_text(json.dumps(small_snapshot()["segments"]))
    with pytest.warns(SnapshotWarning):
        snap = load_snapshot(path)
    assert snap["segments"][0]["total_size"] == 2 * MiB


def test_import_does_not_pull_torch():
    code = "import sys, gpumemlab.recordings.files; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _nested(depth):
    value = "leaf"
    for _ in range(depth):
        value = {"x": [value]}
    return value


@pytest.mark.parametrize("where, fmt, words", [
    (("device_traces", 0, 1, "size"), "pickle", r"device_traces\[0\]\[1\]\['size'\]: an integer of"),
    (("device_traces", 0, 1, "size"), "json", r"device_traces\[0\]\[1\]\['size'\]: an integer of 5000"),
    (("device_traces", 0, 1, "frames", 0, "line"), "json", r"\['frames'\]\[0\]\['line'\]"),
    (("segments", 0, "blocks", 0, "requested_size"), "pickle", r"segments\[0\]\['blocks'\]\[0\]"),
    (("device_traces", 0, 0, "user_metadata"), "json", r"\['user_metadata'\]: an integer"),
])
def test_a_5000_digit_integer_is_one_line_naming_the_entry(where, fmt, words):
    # printing such an integer raises ValueError (over 4300 digits), and a pickle holds it fine
    snap = small_snapshot()
    snap["device_traces"][0][1]["frames"] = [dict(FRAME)]
    target = snap
    for key in where[:-1]:
        target = target[key]
    if fmt == "pickle":
        target[where[-1]] = 10 ** 5000
        data = pickle.dumps(snap)
    else:
        target[where[-1]] = "HUGE"
        data = json.dumps(snap).replace('"HUGE"', "9" * 5000).encode()
    with pytest.raises(SnapshotError, match=words) as err:
        loads_snapshot(data, name=f"huge.{fmt}")
    assert str(err.value).startswith(f"huge.{fmt}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("fmt", ["pickle", "json"])
@pytest.mark.parametrize("depth", [100, 400, 50_000])
def test_deeply_nested_values_are_one_line_naming_the_entry(fmt, depth):
    # 800 levels load but break whatever walks them recursively later (json.dumps, repr);
    # the pure-Python unpickler builds 50,000 levels without complaint
    snap = small_snapshot()
    snap["device_traces"][0][1]["user_metadata"] = "DEEP"
    if fmt == "json":
        data = json.dumps(snap).replace('"DEEP"', '{"x": [' * depth + '0' + ']}' * depth).encode()
    else:
        body = pickle.dumps(snap, protocol=2)
        deep = b"(" * depth + b"K\x00" + b"l" * depth   # MARK ... LIST, nested depth times
        data = body.replace(b"X\x04\x00\x00\x00DEEP", deep)
    with pytest.raises(SnapshotError) as err:
        loads_snapshot(data, name=f"deep.{fmt}")
    message = str(err.value)
    assert message.startswith(f"deep.{fmt}: ") and "\n" not in message
    assert "nested" in message
    if depth < 1000:
        assert message.startswith(f"deep.{fmt}: device_traces[0][1]['user_metadata']")


def test_real_snapshots_pass_the_value_checks():
    snap = small_snapshot()
    snap["device_traces"][0][1]["user_metadata"] = _nested(20)
    snap["device_traces"][0][0]["user_metadata"] = [2**64 - 1, -(2**64 - 1)]
    for data in (pickle.dumps(snap), json.dumps(snap).encode()):
        assert loads_snapshot(data)["device_traces"] == snap["device_traces"]
