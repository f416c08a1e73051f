"""load_snapshot keeps host_segments/host_traces; malformed host entries are one note and the
device part is still read."""
import pytest

from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.recordings.files import dump_snapshot, load_snapshot, normalize_snapshot


def _snap():
    gpu = SimulatedGPU("8GiB", record_pinned_host_memory=True)
    gpu.keep = (gpu.pin(3000), gpu.empty(5000))
    return gpu.snapshot()


def test_round_trip_keeps_host_keys(tmp_path):
    snap = _snap()
    path = dump_snapshot(snap, tmp_path / "host.pickle")
    loaded = load_snapshot(path)
    assert loaded["host_segments"][0]["total_size"] == 4096
    assert [t["action"] for t in loaded["host_traces"]] == ["segment_alloc", "alloc"]
    assert len(loaded["segments"]) == 1


@pytest.mark.parametrize("breakage", [
    lambda s: s.update(host_segments="nope"),
    lambda s: s["host_segments"][0]["blocks"][0].update(state="weird"),
    lambda s: s["host_segments"][0].update(address=-5),
    lambda s: s["host_traces"].append({"action": "alloc", "addr": "x", "size": 1}),
    lambda s: s["host_segments"][0]["blocks"].append(7),
    lambda s: s["host_traces"][1].update(requested_size="3000"),
    lambda s: s["host_traces"].append({"action": "oom", "addr": 0, "size": 9}),  # no device_free
])
def test_malformed_host_entries_are_one_note_and_the_device_part_is_read(breakage):
    snap = _snap()
    breakage(snap)
    out, notes = normalize_snapshot(snap)
    host_notes = [n for n in notes if n.startswith("host memory not read")]
    assert len(host_notes) == 1 and "\n" not in host_notes[0]
    assert "host_segments" not in out and "host_traces" not in out
    assert out["segments"][0]["blocks"][0]["requested_size"] == 5000


def test_snapshot_without_host_keys_is_unchanged():
    gpu = SimulatedGPU("8GiB")
    gpu.keep = gpu.empty(5000)
    out, notes = normalize_snapshot(gpu.snapshot())
    assert "host_segments" not in out and not any("host" in n for n in notes)
