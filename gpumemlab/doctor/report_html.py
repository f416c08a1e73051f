"""The doctor's self-contained HTML report: verdict, block map at the OOM, timeline, fixes table.

One file with inline CSS and SVG, no script, no font, no link to anything: it opens offline, in a
mail attachment or an air-gapped lab. The block map draws at most ``MAP_ROWS`` segments (those
holding the most free memory first, then the largest), grouping segments of equal size and
layout into one row with a count, and says how many it left out; the timeline is reserved and
allocated bytes after every entry, reduced to at most ``TIMELINE_POINTS`` maxima; below it every
allocation of the recording as a band, its allocating frame on hover (``report_bands``).
"""
from __future__ import annotations

import html
import re

from gpumemlab.units import format_size
from gpumemlab.viz.blockmap_groups import group_segments
from gpumemlab.viz.palette import BLOCK_STYLE, LARGEST_FREE_EDGE, OKABE_ITO, REQUEST_COLOUR

from .report import kind_title
from .report_bands import bands_svg

__all__ = ["to_html"]

MAP_ROWS = 40
TIMELINE_POINTS = 600
_CSS = """body{font-family:sans-serif;margin:24px;max-width:1100px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}
.kind{font-size:18px;font-weight:bold}.fits{color:#00734d}.fails{color:#b3400a}
ul{font-size:14px}code{background:#f3f3f3;padding:1px 3px}.small{font-size:12px;color:#555}"""


def _e(text) -> str:
    # no scheme-qualified URL may appear: the page must not even look like it fetches something
    return html.escape(re.sub(r"\bhttps?://", "", str(text)))


def _size(n):
    return "-" if n is None else format_size(n)


def to_html(d, fragment: bool = False) -> str:
    """The report page (``fragment=True``: the body only, for a notebook)."""
    parts = [f"<h1>gpumemlab doctor: {_e(d.source)}</h1>",
             f"<p class='kind'>{_e(kind_title(d))}</p>",
             f"<p>{_e(d.summary)}</p>", _figures(d)]
    views = d.views or {}
    if views.get("segments"):
        parts.append("<h2>Block map at the OOM</h2>" if views.get("oom_index") is not None
                     else "<h2>Block map at the end</h2>")
        parts.append(blockmap_svg(views["segments"], d.details.get("state") or {},
                                  views.get("shift", 0)))
    if views.get("timeline") is not None and len(views["timeline"]):
        parts.append("<h2>Timeline</h2>")
        parts.append(timeline_svg(views["timeline"], views.get("capacity"), views.get("oom_index")))
    if views.get("recording") is not None:
        try:
            live = bands_svg(views["recording"], views.get("device"))
        except (TypeError, ValueError, KeyError) as exc:   # an odd trace: the rest still shows
            live = f"<p class='small'>live allocations not drawn: {_e(exc)}</p>"
        if live:
            parts.append("<h2>Live allocations, by the code that made them</h2>" + live)
    if d.evidence:
        parts.append("<h2>Evidence</h2><ul>" + "".join(f"<li>{_e(x.strip())}</li>"
                                                        for x in d.evidence) + "</ul>")
    if d.fixes:
        parts.append("<h2>Fixes</h2>" + _fixes_table(d))
    extra = d.details if d.mode == "message" else {}
    for title, items in (("Borderline", extra.get("borderline")),
                         ("Doubtful figures (not used)", extra.get("doubtful")),
                         ("Not recommended", extra.get("left_out")),
                         ("What this input cannot tell", d.cannot_tell),
                         ("What the replay assumes", d.assumptions), ("Notes", d.notes)):
        if items:
            parts.append(f"<h2>{title}</h2><ul>" + "".join(f"<li>{_e(x)}</li>" for x in items)
                         + "</ul>")
    body = "\n".join(parts)
    if fragment:
        return f"<div class='gml-doctor'>{body}</div>"
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>gpumemlab doctor: {_e(d.source)}</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>")


def _figures(d):
    rows = [("requested", d.requested_bytes), ("card", d.total_bytes),
            ("driver free", d.free_bytes), ("allocated by PyTorch", d.allocated_bytes),
            ("reserved by PyTorch", d.reserved_bytes),
            ("reserved but unallocated", d.reserved_unallocated_bytes),
            ("outside PyTorch", d.non_pytorch_bytes),
            ("other processes", d.other_processes_bytes)]
    cells = "".join(f"<tr><th>{k}</th><td>{_size(v)}</td></tr>" for k, v in rows if v is not None)
    return f"<table>{cells}</table>" if cells else ""


def _fixes_table(d):
    rec = d.recommended
    head = "<tr><th>fix</th><th>fits</th><th>peak reserved</th><th>headroom</th>" \
           "<th>first failing entry</th><th>how, and why</th></tr>"
    rows = []
    for f in d.fixes:
        fits = "-" if f.fits is None else ("<span class='fits'>yes</span>" if f.fits
                                            else "<span class='fails'>no</span>")
        name = _e(f.name) + (" (recommended)" if f is rec else "")
        how = _e(f.how) + (f"<br><code>{_e(f.code)}</code>" if f.code else "")
        rows.append(f"<tr><td>{name}</td><td>{fits}</td><td>{_size(f.peak_reserved_bytes)}</td>"
                    f"<td>{_size(f.headroom_bytes)}</td><td>"
                    f"{'-' if f.first_failing_entry is None else f.first_failing_entry}</td>"
                    f"<td>{how}<br><span class='small'>{_e(f.why)}</span></td></tr>")
    note = ("<p class='small'>Each setting was replayed on the recording; fits = the replay "
            "reached the end without an OOM.</p>" if d.mode == "snapshot" else
            "<p class='small'>From a message alone nothing is verified: give the doctor a "
            "snapshot to replay these.</p>")
    return f"<table>{head}{''.join(rows)}</table>{note}"


def blockmap_svg(segments, state, shift=0, width=760) -> str:
    """Segments as rows of blocks to scale (the widest row is the largest segment)."""
    groups, left_out = group_segments(segments, MAP_ROWS)
    if not groups:
        return "<p>(no segments)</p>"
    largest = (state.get("largest_free_block") or {}).get("address")
    biggest = max(g["total_size"] for g in groups)
    row_h, label_w = 16, 240
    h = row_h * len(groups) + 24
    out = [f"<svg width='{width + label_w}' height='{h}' "
           f"role='img' aria-label='block map'>"]
    colours = {"active_allocated": BLOCK_STYLE["requested"][0],
               "active_pending_free": BLOCK_STYLE["pending"][0], "inactive": BLOCK_STYLE["free"][0]}
    for r, g in enumerate(groups):
        y = r * row_h + 4
        seg = g["segment"]
        label = (f"{seg['address'] - shift:#x} {format_size(seg['total_size'])}"
                 + (f" x{g['count']}" if g["count"] > 1 else "")
                 + (" exp." if seg.get("is_expandable") else ""))
        out.append(f"<text x='0' y='{y + 11}' font-size='11'>{_e(label)}</text>")
        x = label_w
        scale = width / biggest
        for b in seg["blocks"]:
            w = max(b["size"] * scale, 0.5)
            edge = ""
            if b["state"] == "inactive" and b["address"] - shift == largest:
                edge = f" stroke='{LARGEST_FREE_EDGE}' stroke-width='2'"
            out.append(f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{row_h - 4}' "
                       f"fill='{colours.get(b['state'], '#999')}'{edge}>"
                       f"<title>{_e(b['state'])} {_e(format_size(b['size']))}</title></rect>")
            x += b["size"] * scale
    out.append(f"<text x='0' y='{h - 4}' font-size='11'>blue allocated, purple pending free, grey "
               f"free cached, green outline: the largest free block"
               + (_e(f"; {left_out}") if left_out else "") + "</text></svg>")
    return "".join(out)


def _reduce(values, n):
    if len(values) <= n:
        return list(enumerate(values))
    step = len(values) / n
    out = []
    for k in range(n):
        a, b = int(k * step), max(int((k + 1) * step), int(k * step) + 1)
        chunk = values[a:b]
        out.append((a + max(range(len(chunk)), key=chunk.__getitem__), max(chunk)))
    return out


def timeline_svg(timeline, capacity=None, oom_index=None, width=1000, height=240) -> str:
    """Reserved (orange) and allocated (blue) after every entry; capacity dashed; OOM red."""
    reserved, allocated = list(timeline.reserved), list(timeline.allocated)
    n = len(reserved)
    top = max(max(reserved), capacity or 0, 1)
    sx, sy = (width - 60) / max(n - 1, 1), (height - 50) / top

    def pts(values):
        return " ".join(f"{50 + i * sx:.1f},{height - 20 - v * sy:.1f}"
                        for i, v in _reduce(values, TIMELINE_POINTS))
    out = [f"<svg width='{width}' height='{height}' "
           f"role='img' aria-label='timeline'>",
           f"<polyline fill='none' stroke='{OKABE_ITO['orange']}' stroke-width='1.5' "
           f"points='{pts(reserved)}'/>",
           f"<polyline fill='none' stroke='{OKABE_ITO['blue']}' stroke-width='1.5' "
           f"points='{pts(allocated)}'/>",
           f"<text x='50' y='12' font-size='11'>reserved (orange), allocated (blue) after each of "
           f"{n} entries; top {_e(format_size(top))}; dashed: capacity; red: the OOM</text>",
           f"<line x1='50' x2='50' y1='26' y2='{height - 20}' stroke='#999'/>",
           f"<line x1='50' x2='{width - 10}' y1='{height - 20}' y2='{height - 20}' stroke='#999'/>"]
    if capacity:
        y = height - 20 - capacity * sy
        out.append(f"<line x1='50' x2='{width - 10}' y1='{y:.1f}' y2='{y:.1f}' stroke='#444' "
                   f"stroke-dasharray='4 3'><title>capacity {_e(format_size(capacity))}</title></line>")
    if oom_index is not None:
        x = 50 + min(oom_index, n - 1) * sx
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='26' y2='{height - 20}' "
                   f"stroke='{REQUEST_COLOUR}' stroke-width='2'><title>OOM at entry {oom_index}"
                   f"</title></line>")
    out.append("</svg>")
    return "".join(out)
