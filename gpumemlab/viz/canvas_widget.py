"""The block map and timeline drawn in the browser: an anywidget over a whole recording.

``gml.player`` uses it when a front end is there (a Jupyter kernel, ``GPUMEMLAB_HEADLESS``
unset) and ``anywidget`` imports; otherwise, and in every exported or headless output, the
player's frame stays today's matplotlib PNG. The recording goes to the browser once, packed by
:mod:`gpumemlab.viz.compact` (JSON ``meta`` and one binary ``data`` buffer of typed arrays);
the JavaScript, ``canvas_player.js`` beside this file, ships inside the package and is read from
disk, so nothing is fetched at run time and no build step exists. The browser answers slider
moves itself; ``index`` (the event shown) is synced both ways, so ``player.goto(k)`` moves the
drawing and a drag in the browser moves the kernel's state, throttled.

Importing this module imports anywidget: ``gpumemlab.viz.live_player`` imports it only when the
browser is wanted and anywidget is there.
"""
from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from gpumemlab.viz import compact
from gpumemlab.viz.palette import BLOCK_STYLE, EXPANDABLE_EDGE, SERIES_STYLE

ESM = Path(__file__).with_name("canvas_player.js")


class CanvasPlayer(anywidget.AnyWidget):
    """Segments, blocks and the reserved/allocated timeline of a History, on a <canvas>."""

    _esm = ESM.read_text(encoding="utf-8")
    meta = traitlets.Dict().tag(sync=True)
    data = traitlets.Bytes().tag(sync=True)
    index = traitlets.Int(0).tag(sync=True)

    def __init__(self, history, index: int = 0, **kwargs):
        meta, data = compact.encode(history)
        meta["colours"] = {name: colour for name, (colour, _label) in BLOCK_STYLE.items()}
        meta["colours"].update(expandable=EXPANDABLE_EDGE,
                               reserved=SERIES_STYLE["reserved_bytes"][0],
                               allocated=SERIES_STYLE["allocated_bytes"][0])
        super().__init__(meta=meta, data=data, index=index, **kwargs)

