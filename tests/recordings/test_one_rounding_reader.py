"""One reader of recorded allocator settings: replay and the views round a request alike.

A snapshot that records ``roundup_power2_divisions`` in ``allocator_settings`` but no
``PYTORCH_CUDA_ALLOC_CONF`` string (what ``_set_allocator_settings`` or an older writer leaves)
used to round 1,228,801 B to 1,229,312 B in replay (the defaults: 512-multiples) and to
1,310,720 B in the views (the recorded 4 divisions of the 1-2 MiB bucket: 1 MiB + 256 KiB)."""
import gpumemlab as gml
from gpumemlab.allocator.config import AllocatorConfig, recorded_conf
from gpumemlab.allocator.rounding import round_size
from gpumemlab.recordings.replay.prepare import recorded_alloc_conf
from gpumemlab.viz.size_rules import Rules

REQUEST = 1_228_801


def _settings(divisions):
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=f"roundup_power2_divisions:{divisions}")
    settings = dict(gpu.snapshot()["allocator_settings"])
    settings["PYTORCH_CUDA_ALLOC_CONF"] = ""          # the fields alone
    return settings


def test_the_recorded_divisions_decide_replay_and_views_alike():
    settings = _settings(4)
    view = Rules.from_settings(settings).round_size(REQUEST)
    replayed = round_size(REQUEST, AllocatorConfig.parse(recorded_alloc_conf(
        {"allocator_settings": settings})))
    # 1 MiB <= 1,228,801 < 2 MiB, 4 divisions: steps of 256 KiB, so up to 1 MiB + 256 KiB
    assert view == replayed == (1 << 20) + (1 << 18) == 1_310_720


def test_no_divisions_recorded_rounds_to_512_everywhere():
    settings = _settings(1)
    assert Rules.from_settings(settings).round_size(REQUEST) == 1_229_312
    assert round_size(REQUEST, AllocatorConfig.parse(recorded_conf(settings))) == 1_229_312


def test_a_replay_of_such_a_recording_allocates_what_the_view_says():
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="roundup_power2_divisions:4")
    gpu.record_memory_history()
    keep = gpu.empty(REQUEST)
    snap = gpu.snapshot()
    snap["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = ""
    result = gml.replay(snap)
    assert result.address_mismatches == 0 and result.reproduced
    block = next(b for s in snap["segments"] for b in s["blocks"] if b["state"] != "inactive")
    assert block["size"] == Rules.from_settings(snap["allocator_settings"]).round_size(REQUEST)
    del keep
