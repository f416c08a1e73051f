"""The per-allocation timeline of the doctor's HTML report, as inline SVG: every allocation of
the recording a band as tall as its request, stacked in the order they were made, coloured by the
code that allocated it, with that frame (and the band's size and events) as the band's SVG
``<title>``, which a browser shows on hover. No script and no link: the page stays offline.

The bands are ``gpumemlab.viz.active_timeline.bands`` (the idea of the "Active Memory Timeline"
of PyTorch's ``torch/utils/viz/MemoryViz.js``); only the ``MAX_BANDS`` largest are drawn, and the
report says how many it left out.
"""
from __future__ import annotations

import html
import re

from gpumemlab.units import format_size
from gpumemlab.viz.active_timeline import bands

__all__ = ["bands_svg"]

MAX_BANDS = 1500
MAX_COLOURS = 12
# matplotlib's tab20, the colours gml.timeline uses, in its order; the rest of the keys are grey
_PALETTE = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728",
            "#ff9896", "#9467bd", "#c5b0d5", "#8c564b", "#c49c94")
_OTHER = "#bfbfbf"


def _e(text) -> str:
    return html.escape(re.sub(r"\bhttps?://", "", str(text)))


def bands_svg(snapshot, device=None, width=1000, height=260) -> str:
    """The SVG (with its legend) for a snapshot's trace; "" when it has no allocations."""
    data = bands(snapshot, by="frame", device=device)
    drawn = data["bands"]
    if not drawn:
        return ""
    left_out = 0
    if len(drawn) > MAX_BANDS:
        left_out = len(drawn) - MAX_BANDS
        drawn = sorted(drawn, key=lambda b: -b["size"])[:MAX_BANDS]
    total = {}
    for b in data["bands"]:
        total[b["key"]] = total.get(b["key"], 0) + b["size"]
    ranked = sorted(total, key=lambda k: -total[k])
    colour = {k: (_PALETTE[i] if i < MAX_COLOURS else _OTHER) for i, k in enumerate(ranked)}
    n = max(data["events"], 1)
    top = max(data["peak_allocated"], 1)
    sx, sy = (width - 60) / n, (height - 50) / top

    def x(event):
        return 50 + (max(event, -1) + 0.5) * sx

    def y(nbytes):
        return height - 20 - nbytes * sy

    out = [f"<svg width='{width}' height='{height}' role='img' aria-label='live allocations'>",
           f"<text x='50' y='12' font-size='11'>live allocations by allocating frame: "
           f"{len(data['bands'])} allocations over {data['events']} entries, peak "
           f"{_e(format_size(data['peak_allocated']))} requested; hover a band for its frame"
           + (_e(f"; the {left_out} smallest are left out") if left_out else "") + "</text>"]
    for b in drawn:
        steps = b["offsets"] + [(b["end"], None)]
        bottom = []
        for (t, off), (t_next, _) in zip(steps, steps[1:]):
            bottom += [(x(t), y(off)), (x(t_next), y(off))]
        upper = [(px, py - b["size"] * sy) for px, py in reversed(bottom)]
        points = " ".join(f"{px:.1f},{py:.1f}" for px, py in bottom + upper)
        end = "the end" if b["end"] >= data["events"] else f"entry {b['end']}"
        start = "before the recording" if b["start"] < 0 else f"entry {b['start']}"
        out.append(f"<polygon points='{points}' fill='{colour[b['key']]}' stroke='white' "
                   f"stroke-width='0.3'><title>{_e(b['key'])}: {_e(format_size(b['size']))}, "
                   f"{start} to {end}</title></polygon>")
    out += [f"<line x1='50' x2='50' y1='26' y2='{height - 20}' stroke='#999'/>",
            f"<line x1='50' x2='{width - 10}' y1='{height - 20}' y2='{height - 20}' stroke='#999'/>",
            "</svg>"]
    legend = "".join(f"<span style='white-space:nowrap'><span style='display:inline-block;"
                     f"width:10px;height:10px;background:{colour[k]}'></span> {_e(k)} "
                     f"({_e(format_size(total[k]))} allocated in all)</span> "
                     for k in ranked[:MAX_COLOURS])
    if len(ranked) > MAX_COLOURS:
        legend += f"<span>grey: {len(ranked) - MAX_COLOURS} other frames</span>"
    note = f"<br>{_e(data['note'])}" if data["note"] else ""
    return "".join(out) + f"<p class='small'>{legend}{note}</p>"
