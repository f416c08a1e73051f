"""The player is driven headless: goto / slider / step, with state and metrics read back."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402
from gpumemlab.viz.history import History  # noqa: E402

GiB = 1 << 30


def fragmenting_run():
    """Seven 1.5 GiB tensors on a 12 GiB device; every other one freed; a 2 GiB request.

    Events: 0..13 segment_alloc/alloc pairs, 14..21 four frees (free_requested, free_completed),
    then the 2 GiB request: no cached block fits, cudaMalloc fails (1.5 GiB left), the OOM path
    frees the four whole free segments (22..25) and retries (26 segment_alloc, 27 alloc).
    """
    gpu = gml.SimulatedGPU("12GiB")
    xs = [gpu.empty(3 * GiB // 2) for _ in range(7)]
    for x in xs[::2]:
        x.free()
    big = gpu.empty(2 * GiB)
    return gpu, xs, big


@pytest.fixture(scope="module")
def player():
    gpu, _xs, _big = fragmenting_run()
    return gml.player(History(gpu), request=2 * GiB)


def test_starts_at_the_last_event_and_steps_headless(player):
    assert player.index == len(player) - 1 == 27  # the state the snapshot itself shows
    player.goto(21)
    m = player.metrics()
    assert m["free_bytes"] == 6 * GiB and m["largest_free_block_bytes"] == 3 * GiB // 2
    assert m["external_fragmentation"] == pytest.approx(0.75)
    # the free blocks are whole segments: the OOM path can release them, 1.5 + 6 GiB in all
    assert m["largest_request_bytes"] == 15 * GiB // 2
    assert m["non_releasable_bytes"] == 0
    assert "returns to the cache" in player.description()
    assert player.blockmap_info["fit"] is None
    assert "fits no cached free block" in player.blockmap_info["request_text"]
    player.slider.value = 27  # the slider drives the same state
    assert player.index == 27
    assert "cudaMalloc of a new 2.00 GiB segment" in player.description()
    assert player.metrics()["reserved_bytes"] == 3 * 3 * GiB // 2 + 2 * GiB
    player.step(-5)
    assert player.index == 22 and "cudaFree" in player.description()
    player.step(100)
    assert player.index == 27


def test_state_segments_and_frame(player):
    player.goto(13)
    state = player.state
    assert [s["total_size"] for s in state["segments"]] == [3 * GiB // 2] * 7
    assert all(b["state"] == "active_allocated" for s in state["segments"] for b in s["blocks"])
    assert player.png.startswith(b"\x89PNG")
    assert player.image.value == player.png
    assert "reserved_bytes" in player.table.value
    cursor = player._cursor.get_xdata()
    assert list(cursor) == [13, 13]


def test_stepping_applies_one_event(player, monkeypatch):
    player.goto(10)
    calls = []
    original = History.apply
    monkeypatch.setattr(History, "apply",
                        lambda self, st, i: (calls.append(i), original(self, st, i)))
    player.goto(11)
    assert calls == [11]


def test_errors_are_clear(player):
    with pytest.raises(ValueError, match="out of range"):
        player.goto(28)
    with pytest.raises(TypeError):
        player.goto(2.0)
    gpu = gml.SimulatedGPU("1GiB", record_history=False)
    gpu.empty(100)
    snap = gpu.snapshot()
    snap["device_traces"] = [[]]
    with pytest.raises(ValueError, match="no recorded history"):
        gml.player(snap)


def test_player_over_a_replay_with_history():
    gpu, _xs, _big = fragmenting_run()
    result = gml.replay(gpu.snapshot(), alloc_conf="expandable_segments:True", history=True)
    p = gml.player(result)
    assert len(p) == len(result.snapshot["device_traces"][0])
    assert p.metrics()["reserved_bytes"] == result.snapshot["segments"][0]["total_size"] + sum(
        s["total_size"] for s in result.snapshot["segments"][1:])
    assert p.history.matches_final()


def test_a_jump_back_reuses_its_layout_and_draws_the_same_frame(monkeypatch):
    """A slider jump to a state whose segments were shown before reuses the kept axes and
    background, and the frame is pixel for pixel the one a fresh player draws there."""
    from gpumemlab.viz import live_player

    gpu, _xs, _big = fragmenting_run()
    snap = gpu.snapshot()
    p = gml.player(snap, start=0)
    first_layout = p._plan_key
    p.goto(len(p) - 1)
    assert p._plan_key != first_layout          # the segments changed along the way
    drawn = []
    monkeypatch.setattr(p, "_new_axes", lambda *a: drawn.append(a))
    p.goto(0)
    assert drawn == [] and p._plan_key == first_layout
    assert p.png == gml.player(snap, start=0).png
    # hidden layouts stay in the figure, bounded by LAYOUTS_KEPT
    assert len(p._layouts) <= live_player.LAYOUTS_KEPT
    visible = [ax for ax in p.figure.axes if ax.get_visible()]
    assert set(visible) == set(p._map_axes) | {p.timeline_ax}


def test_frame_verdict_and_legend_follow_the_driver_and_what_is_drawn(player):
    player.goto(21)   # four free 1.5 GiB segments, 1.5 GiB on the driver: c10 frees them, retries
    text = player.blockmap_info["request_text"]
    assert "cudaMalloc(2.00 GiB) fails: the driver has 1.50 GiB free" in text
    assert "unsplit cached segments (4, 6.00 GiB) and its retry gets the 2.00 GiB segment" in text
    labels = [t.get_text() for t in player._map_axes[0].get_legend().get_texts()]
    assert "where the request would go" not in labels        # nothing fits: no hatch drawn
    assert "allocated: lost to rounding" not in labels       # 1.5 GiB blocks: no rounding
    assert "free, cached (inactive)" in labels and "largest free block" in labels
