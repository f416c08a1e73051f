"""The host map, the host timeline and the report's host line, on the simulated GPU's pinned
host allocator (known answers from c10's CachingHostAllocator: power-of-two rounding, a block
held until its copy's event)."""
import json
import pickle

import pytest

import gpumemlab as gml
from gpumemlab.cli import main
from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.units import GiB, KiB, MiB
from gpumemlab.viz.host_view import NO_HOST, free_lists, host_timeline_data

REQUEST = int(20.4 * GiB)


@pytest.fixture
def gpu():
    g = SimulatedGPU(record_pinned_host_memory=True)
    g.keep = [g.pin(REQUEST), g.pin(5000)]
    staging = g.pin(3 * MiB)
    g.device_buffer = g.empty(64 * MiB)
    g.copy_(g.device_buffer, staging, non_blocking=True)   # holds the 4 MiB block's event
    del staging
    return g


def test_the_map_splits_each_free_list_into_its_shares(gpu):
    fig = gml.show(gpu, host=True)
    rows = {r["size_index"]: r for r in fig.gml_host["free_lists"]}
    assert set(rows) == {13, 22, 35}                 # 8 KiB, 4 MiB and 32 GiB lists
    big = rows[35]
    assert (big["pinned_bytes"], big["requested"]) == (32 * GiB, REQUEST)
    assert big["rounding waste"] == 32 * GiB - REQUEST
    assert rows[22]["awaiting event"] == 4 * MiB and rows[22]["cached free"] == 0
    assert (rows[13]["requested"], rows[13]["rounding waste"]) == (5000, 8 * KiB - 5000)
    assert fig.gml_host["pinned_bytes"] == 32 * GiB + 4 * MiB + 8 * KiB
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[-1].startswith("32.00 GiB list: 1 block, 32.00 GiB pinned, 11.60 GiB")


def test_the_held_block_becomes_cached_free_once_its_stream_is_done(gpu):
    gpu.synchronize()
    gpu.pin(1)                                        # allocate processes the event queue
    rows = {r["size_index"]: r for r in free_lists(gpu.snapshot()["host_segments"])}
    assert rows[22]["awaiting event"] == 0 and rows[22]["cached free"] == 4 * MiB


def test_the_timeline_steps_pinned_in_use_and_held_bytes(gpu):
    data = host_timeline_data(gpu)
    last = -1
    assert data["pinned_bytes"][last] == 32 * GiB + 4 * MiB + 8 * KiB
    assert data["in_use_bytes"][last] == 32 * GiB + 8 * KiB      # the staging block let go ...
    assert data["held_bytes"][last] == 32 * GiB + 4 * MiB + 8 * KiB  # ... but not reusable
    fig = gml.timeline(gpu, host=True)
    assert fig.gml_host_timeline is not None and "peak pinned 32.00 GiB" in fig.axes[0].get_title()


def test_a_snapshot_without_host_entries_says_how_to_record_them():
    with pytest.raises(ValueError, match="record_pinned_host_memory=True"):
        gml.show(SimulatedGPU().snapshot(), host=True)
    assert "PyTorch 2.14" in NO_HOST


def test_report_prints_and_writes_the_host_figures(gpu, tmp_path, capsys):
    path = tmp_path / "host.pickle"
    path.write_bytes(pickle.dumps(gpu.snapshot()))
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert ("pinned host memory: 32.00 GiB in 3 blocks (requested 20.40 GiB, rounding waste "
            "11.60 GiB, awaiting a copy's event 4.00 MiB") in text
    assert main(["report", "--json", str(path)]) == 0
    host = json.loads(capsys.readouterr().out)["host"]
    assert host["rounding_waste_bytes"] == 32 * GiB - REQUEST + 8 * KiB - 5000
    assert host["awaiting_event_bytes"] == 4 * MiB


def test_report_on_malformed_host_entries_still_reads_the_device(gpu, tmp_path, capsys):
    snap = gpu.snapshot()
    snap["host_segments"][0]["blocks"][0]["size"] = "big"
    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps(snap))
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr()
    assert "reserved 64.00 MiB" in out.out and "pinned host memory" not in out.out
