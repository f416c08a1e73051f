"""The block map and timeline drawn in the browser: an anywidget over a whole recording.

``gml.player`` and ``gml.whatif`` use it when a front end is there (``gpumemlab.viz.front_end``);
otherwise, and in every exported or headless output, their frame stays today's matplotlib PNG.
The recording goes to the browser once, packed by :mod:`gpumemlab.viz.compact` (JSON ``meta``
and one binary ``data`` buffer of typed arrays); the JavaScript (``canvas_data.js``,
``canvas_timeline.js`` and ``canvas_player.js`` beside this file, joined in that order into one
module) ships inside the package and is read from disk, so nothing is fetched at run time and no
build step exists. The browser answers slider moves itself; ``index`` (the event shown) is synced
both ways, so ``player.goto(k)`` moves the drawing and a drag in the browser moves the kernel's
state once the slider rests. ``request`` is what the kernel worked out for a request at one
event (c10's best fit, ``gpumemlab.viz.metrics.find_fit``, and the verdict of
``gpumemlab.viz.request_path``): the browser marks it while that event is shown, and writes no
allocator rule of its own.

Importing this module imports anywidget: callers import it only when the browser is wanted.
"""
from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from gpumemlab.viz import compact
from gpumemlab.units import parse_size
from gpumemlab.viz.state import ALLOCATED
from gpumemlab.viz.palette import BLOCK_STYLE, EXPANDABLE_EDGE, REQUEST_COLOUR, SERIES_STYLE

PARTS = ("canvas_data.js", "canvas_timeline.js", "canvas_player.js")
HERE = Path(__file__).parent


def module_source() -> str:
    """The widget's JavaScript module: its three files joined."""
    return "\n".join((HERE / name).read_text(encoding="utf-8") for name in PARTS)


def payload(history) -> tuple[dict, bytes]:
    """(meta, data) of ``history`` with the colours the browser draws with."""
    meta, data = compact.encode(history)
    meta["colours"] = {name: colour for name, (colour, _label) in BLOCK_STYLE.items()}
    meta["colours"].update(expandable=EXPANDABLE_EDGE, request=REQUEST_COLOUR,
                           reserved=SERIES_STYLE["reserved_bytes"][0],
                           allocated=SERIES_STYLE["allocated_bytes"][0])
    meta["frame_colours"] = frame_colours(meta, data)
    return meta, data


def frame_colours(meta: dict, data: bytes) -> list:
    """[frame number, colour] for every frame, by the bytes its allocs asked for: ranked and
    coloured as ``gml.timeline(by="frame")`` ranks and colours its keys (the rest grey)."""
    from gpumemlab.viz.active_timeline import key_colours
    c = compact.columns(meta, data)
    total = {}
    for f, req, state in zip(c["block_frame"], c["block_requested"], c["block_state"]):
        if f >= 0 and compact.STATE_NAMES[state] == ALLOCATED:   # one record per alloc
            total[f] = total.get(f, 0) + req
    colours, _ranked = key_colours(total)
    return [[f, _hex(colour)] for f, colour in colours.items()]


def _hex(colour) -> str:
    from matplotlib.colors import to_hex
    return to_hex(colour)


def request_mark(k: int, info: dict, segments: list) -> dict:
    """What the browser marks for a player's request at event ``k``: its verdict, and the
    block c10 would use (``blockmap_info``'s fit over ``segments``; None when none fits)."""
    fit = info.get("fit")
    mark = {"event": k, "bytes": parse_size(info["request"], name="request"),
            "text": info["request_text"], "fit": None}
    if fit is not None:
        mark["fit"] = {"segment_address": segments[fit["segment"]]["address"],
                       "address": fit["address"], "take": fit["take_bytes"],
                       "block": fit["block_bytes"]}
    return mark


class CanvasPlayer(anywidget.AnyWidget):
    """Segments, blocks and the stacked timeline of a History, on a <canvas>."""

    _esm = module_source()
    meta = traitlets.Dict().tag(sync=True)
    data = traitlets.Bytes().tag(sync=True)
    index = traitlets.Int(0).tag(sync=True)
    request = traitlets.Dict().tag(sync=True)

    def __init__(self, history=None, index: int = 0, *, packed=None, **kwargs):
        """Over ``history``, or over ``packed``, a ``(meta, data)`` that :func:`payload` made."""
        meta, data = payload(history) if packed is None else packed
        super().__init__(meta=meta, data=data, index=index, **kwargs)

    def show(self, meta: dict, data: bytes, index: int) -> None:
        """Another recording (the what-if controls' next setting), in one message."""
        with self.hold_sync():
            self.request = {}
            self.meta, self.data, self.index = meta, data, index
