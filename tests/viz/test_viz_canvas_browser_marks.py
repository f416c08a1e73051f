"""The browser block map's marks in a real browser (JupyterLab and headless Chromium, as
tests/viz/test_viz_canvas_browser.py opens them): the request marker and verdict the kernel
works out (stale, and said to be, until the kernel has heard of the event), zoom to blocks
(wheel steps around the pointer keep the byte under it in place; a block too narrow for a pixel
is hovered and painted once zoomed; a drag pans; a double-click resets), the stacked timeline
(hovering a column names the band that a pile in alloc order puts there, worked out here from
the History), frame times of a drag measured with requestAnimationFrame's timestamps (printed,
not asserted) and ``gml.whatif`` drawing in the browser, a control change sending the next
setting's recording. Canvas pixels are read back with getImageData.
"""
from __future__ import annotations

import json
import shutil
import statistics

import pytest

from gpumemlab.viz.palette import BLOCK_STYLE, REQUEST_COLOUR

pytest.importorskip("anywidget")
from .test_viz_canvas_browser import (HERE, LEFT, MAP_MAX_H, N_OPS, RIGHT, ROOT_EL,  # noqa: E402
                                      WIDTH, jump, lab_with_notebook, size_text)

PLOT_W = WIDTH - LEFT - RIGHT
TIMELINE_H = 150
REQUEST = 301 << 20   # fits a cached 302 MiB segment at most events, none at some
WHATIF_OPS = 1500
WIDGETS = "document.querySelectorAll('.gml-canvas-player')"


def cells():
    return [f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
            "import gpumemlab as gml\nfrom canvas_recording import recording\n"
            f"snap = recording({N_OPS})",
            f"p = gml.player(snap, request={REQUEST})\np",
            f"w = gml.whatif(lambda alloc_conf: recording({WHATIF_OPS}, alloc_conf=alloc_conf or"
            " None), alloc_conf=['', 'expandable_segments:True'])\nw"]


def rows_at(h, k):
    """The map's rows after event ``k`` as canvas_player.js lays them out:
    (segment, y, height, scale, number), large pool first."""
    h.goto(k)
    segs = [h.state.segs[a] for a in h.state.addrs]
    large = [s for s in segs if s.pool != "small"]
    small = [s for s in segs if s.pool == "small"]
    row_h = max(1, min(18, MAP_MAX_H // max(1, len(segs) + (1 if large and small else 0))))
    y, out = 4, []
    for group in (large, small):
        if group:
            scale = max(s.size for s in group)
            for s in group:
                out.append((s, y, max(1, row_h - (2 if row_h > 3 else 0)), scale, segs.index(s)))
                y += row_h
            y += row_h
    return out


def x_of(seg, scale, address, view):
    v0, v1 = view
    return LEFT + ((address - seg.address) / scale - v0) / (v1 - v0) * PLOT_W


def pixel(browser, which, x, y, widget=0):
    return browser.js(f"Array.from({WIDGETS}[{widget}].querySelectorAll('canvas')[{which}]"
                      f".getContext('2d').getImageData({int(x)}, {int(y)}, 1, 1).data)")


def hex_rgb(colour):
    return [int(colour[i:i + 2], 16) for i in (1, 3, 5)]


def near(rgba, colour, slack=40):
    return all(abs(a - b) <= slack for a, b in zip(rgba, hex_rgb(colour))) and rgba[3] > 200


def mouse(browser, kind, which, x, y, extra=""):
    """Dispatch a mouse event of ``kind`` at (x, y) of canvas ``which`` of the player; returns
    the x the widget saw (the event's own clientX, less the canvas's left) and its dataset."""
    cls = "WheelEvent" if kind == "wheel" else "MouseEvent"
    return browser.js(
        f"(() => {{ const r = {ROOT_EL}; const c = r.querySelectorAll('canvas')[{which}];"
        " const b = c.getBoundingClientRect();"
        f" const e = new {cls}('{kind}', {{clientX: b.left + {x}, clientY: b.top + {y},"
        f" bubbles: true, cancelable: true {extra}}}); c.dispatchEvent(e);"
        " return {x: e.clientX - b.left, data: Object.assign({}, r.dataset)}; })()")


def born_order(h, k):
    """Live blocks after event ``k``, piled as the stacked timeline piles them: by the event
    that allocated them (0: before the recording), then address."""
    h.goto(k)
    born = {}
    for i, e in enumerate(h.events[:k + 1]):
        if e["action"] == "alloc":
            born[e["addr"]] = i + 1
    segs = [h.state.segs[x] for x in h.state.addrs]
    blocks = [(born.get(a, 0), a) + tuple(s.blocks[a]) for s in segs for a in s.starts]
    return sorted(blocks)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_request_zoom_stacked_timeline_and_whatif_in_the_browser(tmp_path):
    import gpumemlab as gml
    from .canvas_recording import recording
    from gpumemlab.viz.history import History

    snap = recording(N_OPS)
    h = History(snap)
    n = len(h)
    ref = gml.player(History(snap), request=REQUEST, canvas=True)   # the kernel's answers
    fits, none = None, None
    for k in list(range(n // 2, n)) + list(range(n // 2)):
        ref.goto(k)
        if ref.canvas_widget.request["fit"] is not None:
            fits = fits if fits is not None else k
        else:
            none = none if none is not None else k
        if fits is not None and none is not None:
            break
    assert fits is not None and none is not None, "no event with (and one without) a fit"

    with lab_with_notebook(tmp_path, N_OPS, cells()) as browser:
        browser.wait_for(f"{WIDGETS}.length === 2 && {WIDGETS}[1].dataset.event !== undefined",
                         "the what-if's canvas player to draw", limit=240)
        # the request: stale at once (the kernel has not heard), then the kernel's verdict
        for k in (fits, none):
            drawn = jump(browser, k)
            assert drawn["request"] == "" and drawn["requestDrawn"] == "0"
            assert "the kernel is working out event" in browser.js(
                f"{ROOT_EL}.children[1].textContent")
            browser.wait_for(f"{ROOT_EL}.dataset.request !== ''", f"the verdict at {k}", 30)
            ref.goto(k)
            mark = ref.canvas_widget.request
            got = browser.js(f"Object.assign({{}}, {ROOT_EL}.dataset)")
            assert got["request"] == mark["text"] and got["event"] == str(k)
            assert got["requestDrawn"] == ("1" if mark["fit"] else "0")
            if mark["fit"]:
                seg, y, rh, scale, _ = next(r for r in rows_at(h, k)
                                            if r[0].address == mark["fit"]["segment_address"])
                x0 = x_of(seg, scale, mark["fit"]["address"], (0, 1))
                assert near(pixel(browser, 0, x0 + 1, y + rh / 2), REQUEST_COLOUR), (k, x0)

        # zoom to the narrowest live block of the small pool, re-aiming at it every step
        k = fits
        jump(browser, k)
        seg, y, rh, scale, number = min(
            (r for r in rows_at(h, k) if r[0].pool == "small" and r[0].starts),
            key=lambda r: min(r[0].blocks[a][0] for a in r[0].starts))
        address = min(seg.starts, key=lambda a: seg.blocks[a][0])
        size, requested, state = seg.blocks[address]
        assert size / scale * PLOT_W < 4   # a few pixels at most before zooming
        view = (0.0, 1.0)
        for _ in range(25):
            target = x_of(seg, scale, address + min(requested, size) / 2, view)
            seen = mouse(browser, "wheel", 0, target, y + rh / 2, ", deltaY: -100")
            v0, v1 = map(float, seen["data"]["zoom"].split(","))
            at = (seen["x"] - LEFT) / PLOT_W
            assert v1 - v0 == pytest.approx(0.8 * (view[1] - view[0]), rel=1e-9)
            assert v0 + at * (v1 - v0) == pytest.approx(view[0] + at * (view[1] - view[0]),
                                                        abs=1e-12)   # the byte stays put
            view = (v0, v1)
        centre = x_of(seg, scale, address + min(requested, size) / 2, view)
        assert x_of(seg, scale, address + size, view) - x_of(seg, scale, address, view) > 20
        hover = mouse(browser, "mousemove", 0, centre, y + rh / 2)["data"]["hover"]
        offset = size_text(address - seg.address)
        assert hover.startswith(f"{size_text(size)} {state} | requested {size_text(requested)}"
                                f" | seg {number} (small pool"), hover
        assert f"+{offset}" in hover, hover
        colour = BLOCK_STYLE["requested" if state == "active_allocated" else "pending"][0]
        assert near(pixel(browser, 0, centre, y + rh / 2), colour)
        # a drag pans by the pixels moved; a double-click shows whole segments again
        browser.js(f"(() => {{ const c = {ROOT_EL}.querySelector('canvas');"
                   " const b = c.getBoundingClientRect(); const at = x => ({clientX: b.left + x,"
                   " clientY: b.top + 5, bubbles: true});"
                   " c.dispatchEvent(new MouseEvent('mousedown', at(400)));"
                   " window.dispatchEvent(new MouseEvent('mousemove', at(500)));"
                   " window.dispatchEvent(new MouseEvent('mouseup', at(500))); })()")
        v0, v1 = map(float, browser.js(f"{ROOT_EL}.dataset.zoom").split(","))
        assert v1 - v0 == pytest.approx(view[1] - view[0], rel=1e-9)
        assert v0 == pytest.approx(max(0.0, view[0] - 100 / PLOT_W * (view[1] - view[0])))
        mouse(browser, "dblclick", 0, 400, 5)
        assert browser.js(f"{ROOT_EL}.dataset.zoom") == "0,1"

        # the stacked timeline: the column's event, and the widest band in it
        col = PLOT_W // 2
        lo = min(n - 1, col * n // PLOT_W)
        hi = max(lo + 1, (col + 1) * n // PLOT_W)
        alloc = h.totals["allocated_bytes"]
        event = max(range(lo, min(hi, n)), key=lambda i: (alloc[i], -i))
        top, height = max(h.totals["reserved_bytes"]), TIMELINE_H - 22
        pile, below = born_order(h, event), 0
        widest = max(range(len(pile)), key=lambda i: pile[i][3])
        below = sum(b[3] for b in pile[:widest])
        born, address, size, requested, state = pile[widest]
        y = 4 + height - (below + requested / 2) / top * height
        hover = mouse(browser, "mousemove", 1, LEFT + col + 0.5, y)["data"]["hover"]
        assert hover.startswith(
            f"event {event}: allocated {size_text(alloc[event])}, reserved "
            f"{size_text(h.totals['reserved_bytes'][event])} | band: requested "
            f"{size_text(requested)} (block {size_text(size)}, {state}), allocated "
            f"{'at event ' + str(born - 1) if born else 'before the recording'}"), hover
        assert "canvas_recording.py" in hover
        assert pixel(browser, 1, LEFT + col, y)[3] == 255

        # a drag, a move every animation frame, timed by rAF timestamps (printed)
        gaps = json.loads(browser.js(
            f"(async () => {{ const s = {ROOT_EL}.querySelector('input'); const t = [];"
            " let last = null; for (let i = 0; i < 120; i++) {"
            " const now = await new Promise(ok => requestAnimationFrame(ok));"
            " if (last !== null) t.push(now - last); last = now;"
            f" s.value = Math.floor(i * {n} / 120); s.dispatchEvent(new Event('input')); }}"
            " return JSON.stringify(t.slice(1)); })()"))
        print(f"\ndrag over {n} events: frame to frame median {statistics.median(gaps):.1f} ms, "
              f"max {max(gaps):.1f} ms ({len(gaps)} frames)")

        # the what-if: at the peak of the first setting, then the second's recording
        for i, conf in enumerate(("", "expandable_segments:True")):
            other = History(recording(WHATIF_OPS, alloc_conf=conf or None))
            peak = max(range(len(other)), key=other.totals["allocated_bytes"].__getitem__)
            other.goto(peak)
            want = {"event": str(peak), "segments": str(len(other.state.addrs))}
            if i:
                browser.js("(() => { const s = document.querySelector('.widget-dropdown select');"
                           " s.selectedIndex = 1; s.dispatchEvent(new Event('change',"
                           " {bubbles: true})); })()")
            browser.wait_for(f"(() => {{ const d = {WIDGETS}[1].dataset; return d.event ==="
                             f" '{want['event']}' && d.segments === '{want['segments']}'; }})()",
                             f"the what-if's drawing of {conf or 'defaults'} at its peak", 60)
