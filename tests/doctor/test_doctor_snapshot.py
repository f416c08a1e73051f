"""The doctor's snapshot mode: the OOM found and classified from the replayed state, the evidence,
and fixes verified by replay (re-checked here with independent gml.replay calls)."""
import json
import pathlib
import subprocess
import sys

import pytest

import gpumemlab as gml
from gpumemlab import scenarios
from gpumemlab.recordings.files import dump_snapshot

MiB, GiB = 1 << 20, 1 << 30
KIT = pathlib.Path(__file__).parents[1] / "fixtures" / "snapshots" / "sim_fragmentation_oom.pickle"


def test_kit_recording_fragmentation_and_a_fix_that_replays_clean():
    d = gml.doctor(str(KIT))
    assert d.mode == "snapshot" and d.kind == "fragmentation"
    oom = d.details["oom_entry"]
    snap = gml.load_snapshot(KIT)
    assert snap["device_traces"][0][oom]["action"] == "oom"          # the recorded OOM
    assert d.requested_bytes == snap["device_traces"][0][oom]["size"]
    # fragmentation: allocated + request fits the allocator's share, yet no free block holds it
    assert d.allocated_bytes + d.requested_bytes <= d.details["allocator_share_bytes"]
    assert d.details["state"]["largest_free_block"]["size"] < d.requested_bytes
    rec = d.recommended
    assert rec is not None and rec.fits and rec.verified
    # the recommendation replays clean on the same capacity, independently of the doctor
    again = gml.replay(KIT, alloc_conf=rec.alloc_conf, total_memory=rec.total_memory_bytes)
    assert again.oom is None and again.peak_reserved == rec.peak_reserved_bytes
    # and it is the smallest change that fits: nothing with fewer keys fits
    assert all(not f.fits for f in d.fixes if f.alloc_conf and f.alloc_conf.count(",") <
               rec.alloc_conf.count(",") and "fraction" not in f.alloc_conf)
    # the recorded settings still run out there
    base = gml.replay(KIT, alloc_conf="", total_memory=rec.total_memory_bytes)
    assert base.oom is not None
    assert any("runs out at the same entry" in e for e in d.evidence)
    text = str(d)
    assert "kind: fragmentation" in text and "recommended (*)" in text


def test_smallest_card_is_tight_and_verified():
    d = gml.doctor(str(KIT))
    card = d.details["smallest_card"]["bytes"]
    assert gml.replay(KIT, alloc_conf="", total_memory=card).oom is None
    assert gml.replay(KIT, alloc_conf="", total_memory=card - 2 * MiB).oom is not None
    big = next(f for f in d.fixes if f.name == "bigger_card")
    assert big.fits and big.total_memory_bytes == card


def _recorded(scenario, total="4GiB", conf="", **kw):
    gpu = gml.SimulatedGPU(total, alloc_conf=conf, **kw)
    rec = scenarios.SCENARIOS[scenario](gpu, release=False)
    return rec.snapshot, gpu


def test_exhaustion_no_setting_fits_and_the_shortfall_is_named():
    snap, _gpu = _recorded("batch_growth")
    d = gml.doctor(snap)
    assert d.kind == "exhaustion"
    assert d.allocated_bytes + d.requested_bytes > d.details["allocator_share_bytes"]
    assert not any(f.fits for f in d.fixes if f.alloc_conf)
    assert d.recommended.name == "bigger_card"
    assert any(f.name == "reduce_peak_memory" for f in d.fixes)


def test_memory_outside_the_allocator_is_named_with_the_card_size():
    # 1 GiB of the 4 GiB card is held outside PyTorch (another process, a CUDA context)
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="", other_memory="1GiB")
    keep = [gpu.empty(500 * MiB) for _ in range(5)]
    with pytest.raises(gml.OutOfMemoryError):
        gpu.empty(800 * MiB)
    snap = gpu.snapshot()
    plain = gml.doctor(snap)
    assert plain.non_pytorch_bytes is None and any("outside PyTorch" in c for c in plain.cannot_tell)
    assert plain.kind == "exhaustion"             # on the 3 GiB the allocator could use
    d = gml.doctor(snap, total_memory="4GiB")
    assert d.non_pytorch_bytes == 1 * GiB and d.total_bytes == 4 * GiB
    assert d.details["allocator_share_bytes"] == 3 * GiB
    # it would fit the card, not the allocator's share: the outside memory makes the difference
    assert d.kind == "outside_pytorch"
    del keep


def test_no_oom_says_it_fits_with_peak_and_headroom():
    snap, gpu = _recorded("train_step_like", total="8GiB")
    d = gml.doctor(snap)
    assert d.kind == "no_oom" and "No OOM" in d.summary
    assert d.reserved_bytes == gml.replay(snap).peak_reserved
    assert any("headroom" in c for c in d.cannot_tell)
    d = gml.doctor(snap, total_memory="8GiB")
    assert "headroom" in d.summary and d.total_bytes == 8 * GiB
    smallest = d.details["smallest_card"]["bytes"]
    assert gml.replay(snap, alloc_conf="", total_memory=smallest).oom is None


def test_a_smaller_card_finds_the_first_failure():
    snap, gpu = _recorded("train_step_like", total="8GiB")
    peak = gml.replay(snap).peak_reserved
    d = gml.doctor(snap, total_memory=peak // 2)
    assert d.kind in ("fragmentation", "exhaustion")
    first = d.details["oom_entry"]
    assert gml.replay(snap, total_memory=peak // 2).oom["index"] == first


def test_state_only_snapshot_against_a_request():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="", record_history=False)
    keep = [gpu.empty(100 * MiB) for _ in range(6)]
    for a in keep[::2]:
        a.free()
    snap = gpu.snapshot()
    assert not any(snap["device_traces"])
    d = gml.doctor(snap, request="100MiB")
    assert d.kind == "no_oom" and "fits now" in d.summary
    d = gml.doctor(snap, request="300MiB", total_memory="1GiB")
    assert d.kind is not None and any("no trace" in c for c in d.cannot_tell)
    d = gml.doctor(snap)
    assert "--request" in d.summary
    del keep


def test_what_if_on_a_card_too_small_for_the_start_state_is_an_oom_at_entry_0():
    gpu = gml.SimulatedGPU("2GiB", alloc_conf="", record_frames=False)
    before = [gpu.empty(200 * MiB) for _ in range(4)]
    gpu.allocator.alloc_buffer.clear()                  # recording begins with 800 MiB live
    x = gpu.empty(10 * MiB)
    x.free()
    r = gml.replay(gpu.snapshot(), alloc_conf="", total_memory="500MiB")
    assert r.oom is not None and r.oom["index"] == 0 and r.oom["during"] == "start state"
    assert r.oom["shortfall_bytes"] >= 300 * MiB and r.replayed == 0
    d = gml.doctor(gpu.snapshot(), total_memory="500MiB", search=False)
    assert d.kind == "exhaustion" and d.details["oom_during"] == "start state"
    assert "When recording began, 800.00 MiB was live" in d.summary
    assert d.details["shortfall_bytes"] == 300 * MiB and d.requested_bytes is None
    del before


def test_html_report_is_self_contained(tmp_path):
    d = gml.doctor(str(KIT))
    page = d.html()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http://" not in page and "https://" not in page and " src=" not in page
    assert "<svg" in page and "Fixes" in page and d.recommended.name in page


def test_cli_snapshot_json_and_diff(tmp_path):
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", str(KIT), "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["kind"] == "fragmentation" and out["recommended"] == "expandable_segments"
    fix = next(f for f in out["fixes"] if f["name"] == out["recommended"])
    assert fix["fits"] is True and fix["peak_reserved_bytes"] > 0
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", str(tmp_path / "no")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "no such file" in run.stderr
    a, _g = _recorded("train_step_like", total="8GiB")
    b_gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    rec = scenarios.SCENARIOS["train_step_like"](b_gpu, release=False, steps=5)
    pa, pb = dump_snapshot(a, tmp_path / "a.pickle"), dump_snapshot(rec.snapshot, tmp_path / "b.pickle")
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "diff", str(pa), str(pb)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("live memory:") and "grew:" in run.stdout and "new in" in run.stdout


@pytest.mark.skipif(__import__("shutil").which("chromium") is None,
                    reason="Debian's chromium is not installed")
def test_html_report_opens_offline_in_chromium(tmp_path):
    page = tmp_path / "doctor.html"
    page.write_text(gml.doctor(str(KIT)).html(), encoding="utf-8")
    run = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--dump-dom", f"file://{page}"],
                         capture_output=True, timeout=120)
    dom = run.stdout.decode(errors="replace")
    assert run.returncode == 0
    for text in ("fragmentation", "Block map at the OOM", "Timeline", "expandable_segments",
                 "<rect", "<polyline"):
        assert text in dom, text
    shot = tmp_path / "shot.png"
    run = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--window-size=1200,1400",
                          f"--screenshot={shot}", f"file://{page}"], capture_output=True, timeout=120)
    assert run.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000


def test_html_report_draws_each_allocation_with_its_frame_on_hover():
    import re
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")

    def load_weights(card):
        return [card.empty(8 * MiB) for _ in range(3)]

    def forward(card):
        keep = card.empty(16 * MiB)
        tmp = card.empty(4 * MiB)
        del tmp
        return keep

    _keep = (load_weights(gpu), forward(gpu))
    page = gml.doctor(gpu.snapshot()).html()
    assert "<script" not in page and "http" not in page
    titles = re.findall(r"<polygon [^>]*fill='(#[0-9a-f]{6})'[^>]*><title>([^<]*)</title>", page)
    assert len(titles) == 5                                  # one band per allocation
    by_function = {}
    for fill, title in titles:
        by_function.setdefault(title.split(" (")[0], set()).add(fill)
    assert set(by_function) == {"load_weights", "forward"}
    assert by_function["load_weights"].isdisjoint(by_function["forward"])   # one colour each
    assert any("4.00 MiB" in t and "to entry" in t for _f, t in titles)       # the freed temporary
