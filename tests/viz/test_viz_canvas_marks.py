"""The kernel's side of the browser block map's marks: the request marker the player sends
(c10's best fit and the verdict, worked out in Python at the event shown), the stacked
timeline's order (each block's alloc time), the frame colours, and ``gml.whatif`` drawing in the
browser when asked (the PNG only when read), a PNG for a result without history."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402
from gpumemlab.viz import compact  # noqa: E402
from gpumemlab.viz.history import History  # noqa: E402

pytest.importorskip("anywidget")
from .test_viz_player import GiB, fragmenting_run  # noqa: E402

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def snap():
    return fragmenting_run()[0].snapshot()   # events 0..27, as test_viz_player says


def test_request_marker_is_the_kernels_best_fit_at_the_event_shown(snap):
    p = gml.player(snap, request="1GiB", canvas=True)
    w = p.canvas_widget
    p.goto(21)   # four 1.5 GiB segments free: best fit is the lowest address among equals
    mark = w.request
    assert mark["event"] == 21 and mark["bytes"] == GiB
    assert mark["text"] == p.blockmap_info["request_text"] and "request fits" in mark["text"]
    segs = compact.decode(w.meta, w.data, 21)
    free = [(s[0], b) for s in segs for b in s[5] if b[3] == "inactive"]
    first_address, first_block = min(free, key=lambda f: (f[1][1], f[1][0]))
    assert mark["fit"]["segment_address"] == first_address
    assert mark["fit"]["address"] == first_block[0] and mark["fit"]["block"] == 3 * GiB // 2
    # 1 GiB of a 1.5 GiB block: the large pool splits it (the rest is over 1 MiB)
    assert mark["fit"]["take"] == GiB
    p.goto(13)   # every tensor alive: no cached block, c10 would cudaMalloc
    assert w.request["event"] == 13 and w.request["fit"] is None
    assert "fits no cached free block" in w.request["text"]
    assert gml.player(snap, canvas=True).canvas_widget.request == {}   # no request, no mark


def test_blocks_carry_the_time_of_their_alloc_for_the_stacked_timeline(snap):
    h = History(snap)
    meta, data = compact.encode(h)
    c = compact.columns(meta, data)
    allocs = {}
    for i, e in enumerate(h.events):
        if e["action"] == "alloc":
            allocs.setdefault(e["addr"], []).append(i + 1)
    for i in range(meta["n_blocks"]):
        a, t0 = c["block_address"][i], c["block_t0"][i]
        born = max(t for t in allocs[a] if t <= t0)
        assert c["block_born"][i] == born
        # a pending free keeps its alloc's time, not the time its free was requested
        if compact.STATE_NAMES[c["block_state"][i]] == "active_pending_free":
            assert born < t0


def test_frames_are_ranked_and_coloured_as_the_timeline_does(snap):
    from gpumemlab.viz.active_timeline import key_colours
    from gpumemlab.viz.canvas_widget import payload
    meta, _data = payload(History(snap))
    assert len(meta["frame_colours"]) == len(meta["frames"]) >= 1
    colours = dict(meta["frame_colours"])
    assert colours[0] == matplotlib.colors.to_hex(key_colours({0: 1})[0][0])  # tab20's first


def _runs(alloc_conf=""):
    gpu = gml.SimulatedGPU("12GiB", alloc_conf or None)
    xs = [gpu.empty(3 * GiB // 2) for _ in range(7)]
    for x in xs[::2]:
        x.free()
    return gpu, xs


def test_whatif_draws_in_the_browser_and_the_png_only_when_read(monkeypatch):
    monkeypatch.delenv("GPUMEMLAB_HEADLESS", raising=False)
    w = gml.whatif(_runs, alloc_conf=["", "expandable_segments:True"], canvas=True)
    c = w.canvas_widget
    assert c is not None and w.frame.children == (c,) and w._png is None
    gpu, alive = _runs()   # the tensors kept alive, as the what-if keeps them with its result
    h = History(gpu)
    n = len(h)
    peak = max(range(n), key=h.totals["allocated_bytes"].__getitem__)
    assert c.meta["n_events"] == n and c.index == peak == 13   # all seven alive
    assert w.png.startswith(PNG) and w._png is not None        # drawn when read (export)
    w.update(alloc_conf="expandable_segments:True")
    assert w.canvas_widget is c and w._png is None             # the same widget, a new recording
    segs = compact.decode(c.meta, c.data, c.index)
    assert len(segs) == 1 and segs[0][4] is True                # one expandable segment
    assert "data:image/png;base64," in w._repr_mimebundle_()["text/html"]


def test_whatif_without_a_front_end_and_for_a_result_without_history_is_the_png(monkeypatch):
    monkeypatch.delenv("GPUMEMLAB_HEADLESS", raising=False)
    w = gml.whatif(_runs, alloc_conf=[""])   # pytest is no Jupyter kernel
    assert w.canvas_widget is None and w.frame.children == (w.image,)
    assert bytes(w.image.value).startswith(PNG)
    replayed = gml.whatif(fragmenting_run()[0].snapshot(), alloc_conf=[""], canvas=True)
    assert replayed.canvas_widget is None and replayed.frame.children == (replayed.image,)
    monkeypatch.setenv("GPUMEMLAB_HEADLESS", "1")
    assert gml.whatif(_runs, alloc_conf=[""], canvas=True).widget is None
