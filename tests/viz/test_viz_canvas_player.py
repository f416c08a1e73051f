"""gml.player with the browser block map (canvas=True) and without (headless, the PNG): which one
is chosen, and that the kernel's state and the widget's event index follow each other."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402
from gpumemlab.viz import compact  # noqa: E402

pytest.importorskip("anywidget")
from .test_viz_player import fragmenting_run  # noqa: E402

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def gpu():
    return fragmenting_run()[0].snapshot()   # one recording: events 0..27 as test_viz_player says


def test_headless_and_outside_a_kernel_the_frame_is_the_png(gpu, monkeypatch):
    monkeypatch.delenv("GPUMEMLAB_HEADLESS", raising=False)
    p = gml.player(gpu)   # pytest has no Jupyter kernel: no front end
    assert p.canvas_widget is None and p.image in p.widget.children
    assert bytes(p.image.value).startswith(PNG) and p.png == bytes(p.image.value)
    monkeypatch.setenv("GPUMEMLAB_HEADLESS", "1")
    assert gml.player(gpu, canvas=None).canvas_widget is None


def test_canvas_player_sends_the_recording_and_follows_goto(gpu):
    p = gml.player(gpu, canvas=True)
    w = p.canvas_widget
    assert w in p.widget.children and p.image not in p.widget.children
    assert w.meta["n_events"] == len(p) >= 28 and w.meta["colours"]["free"] == "#DDDDDD"
    assert "export default" in w._esm   # the module shipped in the package, read from disk
    # the payload is the History's recording: decoding it gives the kernel's block map
    # Play's jslink starts by copying Play's value over: it must say where the player starts,
    # or showing the widget pulls the browser back to event 0; it links to the drawing only
    assert p.play.value == len(p) - 1 == w.index
    assert p._link.source == (p.play, "value") and p._link.target == (w, "index")
    p.goto(21)
    assert w.index == 21
    decoded = compact.decode(w.meta, w.data, 21)
    assert [(s[0], s[1]) for s in decoded] == \
        [(s["address"], s["total_size"]) for s in p.state["segments"]]
    assert bytes(p.image.value) == b""        # nothing drawn in the kernel while the browser draws
    png = p.png                         # the exported copy is drawn when asked for
    assert png.startswith(PNG) and p._png_index == 21
    html = p._repr_mimebundle_()["text/html"]
    assert "data:image/png;base64," in html
    # a move in the browser (the widget's index) moves the kernel's state
    w.index = 27
    assert p.index == 27 and p.slider.value == 27
    assert "cudaMalloc of a new 2.00 GiB segment" in p.description()
