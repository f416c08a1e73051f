"""Every reader on real ``torch.cuda.memory._dump_snapshot`` files from public repositories
(tests/fixtures/real/, provenance in its PROVENANCE.md): they share frames as PyTorch's writer
does, begin mid-run, carry C++ stacks or Windows paths, and must load, replay address for
address and go through the report, verify, diff, doctor (text, JSON, HTML), growth, the block
map, the timeline and the player."""
import hashlib
import json
import pickle
import pickletools
from pathlib import Path

import pytest

import gpumemlab as gml
from gpumemlab.cli import main
from gpumemlab.doctor.search import smallest_card
from gpumemlab.recordings.files import SnapshotError, dump_snapshot, load_snapshot, loads_snapshot
from gpumemlab.recordings.replay.prepare import recorded_alloc_conf

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
FIXTURES = sorted(REAL.glob("*.pickle"))
NAMES = [p.stem for p in FIXTURES]
MiB = 1 << 20


@pytest.fixture(scope="module")
def loaded():
    return {p.stem: load_snapshot(p) for p in FIXTURES}


def test_the_fixtures_are_there_and_each_is_in_the_provenance_with_its_sha256():
    assert 5 <= len(FIXTURES) <= 8
    assert sum(p.stat().st_size for p in FIXTURES) <= 8 * MiB
    text = (REAL / "PROVENANCE.md").read_text()
    for p in FIXTURES:
        assert p.name in text and hashlib.sha256(p.read_bytes()).hexdigest() in text, p.name


@pytest.mark.parametrize("name", NAMES)
def test_a_real_file_shares_frames_and_loads(name, loaded):
    data = (REAL / f"{name}.pickle").read_bytes()
    gets = sum(op.name in ("BINGET", "LONG_BINGET") for op, _a, _p in pickletools.genops(data))
    assert gets > 1000          # what made the visit-counting check refuse every real file
    snap = loaded[name]
    entries = [e for t in snap["device_traces"] for e in t if e.get("frames")]
    assert len({id(e["frames"]) for e in entries}) < len(entries)   # lists shared across entries


@pytest.mark.parametrize("name", NAMES)
def test_every_address_replays_exactly(name, loaded):
    snap = loaded[name]
    allocs = sum(e["action"] == "alloc" for e in snap["device_traces"][0])
    r = gml.replay(snap)
    assert r.address_mismatches == 0 and r.reproduced and not r.start_problems
    assert r.allocations == allocs and r.oom is None


@pytest.mark.parametrize("name", NAMES)
def test_report_verify_and_diff_commands(name, capsys):
    path = str(REAL / f"{name}.pickle")
    other = str(FIXTURES[(NAMES.index(name) + 1) % len(FIXTURES)])
    assert main(["report", path]) == 0
    assert main(["verify", path]) == 0
    assert "every allocation address reproduced" in capsys.readouterr().out
    assert main(["diff", path, other]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("name", NAMES)
def test_doctor_text_json_and_html(name, loaded):
    d = gml.doctor(loaded[name], search=False)
    assert d.kind == "no_oom" and "No OOM" in str(d)
    doc = json.loads(d.json())
    assert doc["schema_version"] == 1 and doc["allocated_bytes"] == d.allocated_bytes
    assert "views" not in doc and doc["kind"] == "no_oom"
    page = d.html()
    assert page.lstrip().lower().startswith("<!doctype html") and "<svg" in page


@pytest.mark.parametrize("name", NAMES)
def test_growth_blockmap_timeline_and_player(name, loaded):
    import matplotlib.pyplot as plt

    snap = loaded[name]
    report = gml.growth(snap)
    assert json.loads(report.json()) and str(report)
    fig = gml.show(snap)
    plt.close("all")
    ax = gml.timeline(snap)
    assert ax is not None
    plt.close("all")
    p = gml.player(snap, dpi=30)
    assert len(p) == len(snap["device_traces"][0]) + 1 or len(p) > 0
    p.goto(0)
    p.step(1)
    assert p.index == 1 and p.metrics()["reserved_bytes"] >= 0
    plt.close("all")
    del fig


def test_the_smallest_card_on_a_mid_run_recording_fits_and_one_step_below_runs_out(loaded):
    """The recording begins with 582 MiB already reserved: the card search replays with that
    start state (a what-if would drop the cache and claim a smaller card)."""
    snap = loaded["cs336_forward_fp32_silmont"]
    card = smallest_card(snap, recorded_alloc_conf(snap), 0)
    assert card["bytes"] is not None
    assert gml.replay(snap, total_memory=card["bytes"]).oom is None
    assert gml.replay(snap, total_memory=card["bytes"] - 2 * MiB).oom is not None


def test_the_kits_dumps_share_frames_as_pytorchs_do(tmp_path):
    gpu = gml.SimulatedGPU("8GiB")
    gpu.record_memory_history()
    for _ in range(3):                 # the same call site, so the same stack, each time
        gpu.free(gpu.empty(3 * MiB))
    keep = gpu.empty(5 * MiB)
    path = dump_snapshot(gpu, tmp_path / "kit.pickle")
    data = path.read_bytes()
    assert any(op.name in ("BINGET", "LONG_BINGET") for op, _a, _p in pickletools.genops(data))
    snap = loads_snapshot(data)
    trace = snap["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc" and e.get("frames")]
    assert allocs and allocs[0]["frames"] is allocs[1]["frames"]       # one list per stack
    frees = [e for e in trace if e["action"] == "free_requested"]
    assert frees[0]["frames"] is allocs[0]["frames"]
    block = next(b for s in snap["segments"] for b in s["blocks"] if b["state"] != "inactive")
    assert block["frames"] and block["frames"][0] is allocs[-1]["frames"][0]   # one dict per frame
    del keep


def test_references_to_references_are_refused_in_one_line():
    # each list 100 references to the one below: 40 levels unfold to 100**40 frames
    nest = [{"filename": "x.py", "line": 1, "name": "f"}]
    for _ in range(40):
        nest = [nest] * 100
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "size": 512,
                                                 "frames": nest}]]}
    data = pickle.dumps(snap)
    assert len(data) < 20_000
    with pytest.raises(SnapshotError, match="crafted") as err:
        loads_snapshot(data, name="bomb.pickle")
    assert "\n" not in str(err.value) and "bomb.pickle" in str(err.value)
