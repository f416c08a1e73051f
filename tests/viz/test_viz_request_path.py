"""The block map's request verdict follows c10's malloc path to its end: the driver's refusal,
the memory fraction, the cache released, OutOfMemoryError. Checked against the simulator doing it."""
import random

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402
from gpumemlab.viz.request_path import driver_room, request_verdict  # noqa: E402
from gpumemlab.viz.size_rules import Rules  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


def fragmented_card():
    """Lesson 02's card: one 7 GiB segment, 1 GiB pieces free and live in turn, 1 GiB on the driver."""
    sim = gml.SimulatedGPU("8GiB", alloc_conf="")
    sim.empty(7 * GiB).free()
    blocks = [sim.empty(GiB) for _ in range(7)]
    for i in (0, 2, 4, 6):
        blocks[i].free()
    return sim, blocks


def test_verdict_on_a_card_the_driver_cannot_serve():
    sim, _ = fragmented_card()
    text = gml.show(sim, request=2 * GiB).gml_blockmap["request_text"]
    assert "cudaMalloc(2.00 GiB) fails: the driver has 1024.00 MiB free" in text
    assert "frees its unsplit cached segments (none here: every segment holds a live block)" in text
    assert text.endswith("raises OutOfMemoryError")
    assert "would cudaMalloc a new" not in text
    with pytest.raises(gml.OutOfMemoryError):
        sim.empty(2 * GiB)


def test_whole_free_segments_are_released_and_the_retry_succeeds():
    sim = gml.SimulatedGPU("8GiB", alloc_conf="")
    pieces = [sim.empty(GiB) for _ in range(7)]  # seven segments of 1 GiB
    for i in (0, 2, 4, 6):
        pieces[i].free()
    text = gml.show(sim, request=2 * GiB).gml_blockmap["request_text"]
    assert "fails: the driver has 1024.00 MiB free" in text
    assert "unsplit cached segments (4, 4.00 GiB) and its retry gets the 2.00 GiB segment" in text
    assert sim.empty(2 * GiB).size == 2 * GiB


def test_the_memory_fraction_refuses_before_the_driver_is_asked():
    sim = gml.SimulatedGPU("8GiB", alloc_conf="")
    sim.set_per_process_memory_fraction(0.5)
    keep = sim.empty(3 * GiB)
    text = gml.show(sim, request=2 * GiB).gml_blockmap["request_text"]
    assert "is refused: the memory fraction allows 4.00 GiB and 3.00 GiB is reserved" in text
    assert text.endswith("raises OutOfMemoryError") and keep.size == 3 * GiB
    with pytest.raises(gml.OutOfMemoryError):
        sim.empty(2 * GiB)


def test_a_recording_ending_in_an_oom_gives_the_driver_free_it_recorded():
    sim, _ = fragmented_card()
    sim.record_memory_history()
    with pytest.raises(gml.OutOfMemoryError):
        sim.empty(2 * GiB)
    snap = sim.snapshot()  # a plain dict: no device to ask
    room = driver_room(snap, snap["segments"], trace=snap["device_traces"][0])
    assert room["how"] == "recorded OOM" and room["free"] == GiB
    text = gml.show(snap, request=2 * GiB).gml_blockmap["request_text"]
    assert "the driver has 1024.00 MiB free" in text and text.endswith("OutOfMemoryError")


def test_unknown_driver_room_is_said_unknown():
    segs = gml.SimulatedGPU("8GiB", alloc_conf="")
    segs.empty(GiB)
    text = request_verdict(None, segs.snapshot()["segments"], Rules(), 2 * GiB, 0)
    assert "would cudaMalloc a new 2.00 GiB segment (it fails if the driver has less free" in text


def _predicted_ok(text):
    return not text.endswith("raises OutOfMemoryError")


@pytest.mark.parametrize("conf", ["", "max_split_size_mb:300", "expandable_segments:True"])
def test_the_verdict_agrees_with_the_simulator_on_random_states(conf):
    """Random workloads on a small card: the verdict says OOM exactly when malloc raises."""
    rng = random.Random(7)
    outcomes = []
    for trial in range(40):
        sim = gml.SimulatedGPU("2GiB", alloc_conf=conf)
        live = []
        for _ in range(rng.randrange(3, 25)):
            if live and rng.random() < 0.4:
                live.pop(rng.randrange(len(live))).free()
                continue
            try:
                live.append(sim.empty(rng.choice([2, 30, 100, 300, 700]) * MiB))
            except gml.OutOfMemoryError:
                pass
        request = rng.choice([200, 500, 900, 1300]) * MiB
        text = gml.show(sim, request=request).gml_blockmap["request_text"]
        try:
            sim.empty(request)
            happened = True
        except gml.OutOfMemoryError:
            happened = False
        assert _predicted_ok(text) == happened, (trial, text)
        outcomes.append((happened, "fails: the driver" in text or "refused" in text))
    # both endings, and retries after a release, are among the cases
    assert {(True, True), (False, True), (True, False)} <= set(outcomes), outcomes
