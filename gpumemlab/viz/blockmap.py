"""The block map: every segment as a band, its blocks coloured by state (``gml.show``).

The picture of fragmentation: free memory (grey) scattered between allocated blocks (blue), so
that no single gap holds a large tensor. One band per segment in address order ('seg N'), the
small pool (requests up to 1 MiB, 2 MiB segments) drawn apart from the large pool. Band
lengths are to scale inside a panel; when large segments span very different sizes they are
split into panels with their own scale, each titled with its range, so a 20 MiB segment is not a
speck next to a 20 GiB one. Blocks are drawn as a few ``PolyCollection``s (one per state), never
one patch per block, so 100,000 blocks draw in about a second. Allocated blocks narrower than
1/200 of a panel are widened to that hair, drawn over the free block beside them, so that no
allocation (not even a 1-byte tensor) disappears.
"""
from __future__ import annotations

import textwrap

from gpumemlab.units import format_size
from gpumemlab.viz.palette import (BLOCK_STYLE, EXPANDABLE_EDGE, LARGEST_FREE_EDGE,
                                   REQUEST_COLOUR, SEGMENT_EDGE, unit_for)

from .active_timeline import OTHER_COLOUR
from .blockmap_groups import group_segments
from .blockmap_keys import keyed_colours, keyed_rects
from .metrics import find_fit, segment_figures
from .request_path import driver_room, request_verdict
from .source import device_segments, device_trace, pick_device, read_source, settings_line
from .words import count

PANEL_RATIO = 8  # large segments more than 8x smaller than a panel's largest get their own panel
MAX_LARGE_PANELS = 3
LABEL_ROWS = 40  # name every band when a panel has at most this many
GROUP_ABOVE = 150  # more segments than this would be bands under a pixel: group them ...
MAP_ROWS = 40      # ... into at most this many rows of equal segments, the rest summed up
MIN_WIDTH = 1 / 200  # of a panel's width: the narrowest an allocated block is drawn (4.5 px of 900)


def show(source, ax=None, *, request=None, stream: int = 0, title=None, device=None,
         highlight_largest: bool = True, by=None, host: bool = False):
    """Draw the block map of a snapshot, segment list, device or replay result.

    Args:
        ax: draw into this Axes (one shared scale, pools one after the other) instead of a new
            figure with a panel per pool and size range.
        request: a request size in bytes (or "2GiB"): mark the cached free block c10 would give
            it, or say what c10's malloc does next when none fits (a new segment, or the
            driver's refusal, the cache released and OutOfMemoryError: ``request_path``).
        stream: the stream of that request.
        title: replaces the first title line (the device name).
        by: colour allocated blocks by the code that made them ("frame") or their size class
            ("size"), as ``gml.timeline(..., by=...)`` colours its bands (``blockmap_keys``).
        host: draw the pinned host memory instead (``viz.host_view.show_host``): a row per
            power-of-two free list of the host allocator.

    Returns:
        The matplotlib Figure.
    """
    if host:
        from .host_view import show_host

        return show_host(source, ax, title=title)
    src = read_source(source)
    every = device_segments(src.snapshot, device)
    segments, left_out, counts = _readable(every)
    import matplotlib.pyplot as plt
    if ax is None:
        panels = plan_panels(segments)
        heights = [max(1.0, min(6.0, 0.9 + 0.22 * len(p["rows"]))) for p in panels]
        fig = plt.figure(figsize=(10, min(11.0, 2.4 + sum(heights))), layout="constrained")
        axes = fig.subplots(len(panels), 1, squeeze=False,
                            gridspec_kw={"height_ratios": heights})[:, 0]
    else:
        panels = plan_panels(segments, single=True)
        fig, axes = ax.figure, [ax]
    for p in panels:
        p["counts"] = counts
    room = None if request is None else driver_room(
        source, every, total_memory=src.total_memory, trace=device_trace(src.snapshot, device))
    keys = None if by is None else keyed_colours(every, by)
    info = draw_blockmap(fig, axes, panels, segments, src.rules, request=request, stream=stream,
                         highlight_largest=highlight_largest, room=room, keys=keys)
    name = title or src.name or f"snapshot of device {pick_device(src.snapshot, device)}"
    figs = segment_figures(every, src.rules, stream=stream)
    head = "\n".join(textwrap.wrap(
        f"{name}: reserved {format_size(figs['reserved_bytes'])}, allocated "
        f"{format_size(figs['allocated_bytes'])} in {count(len(every), 'segment')}", 100) +
        textwrap.wrap(settings_line(src.settings), 100))
    foot = (f"free cached {format_size(figs['free_bytes'])} in "
            f"{count(figs['free_blocks'], 'block')}, "
            f"largest {format_size(figs['largest_free_block_bytes'])} (external fragmentation "
            f"{100 * figs['external_fragmentation']:.1f}%); rounding waste "
            f"{format_size(figs['rounding_waste_bytes'])}")
    if counts:
        foot += ("\nequal segments drawn once (the count is in the row name), most free memory "
                 "first" + (f"; {left_out}" if left_out else ""))
    if info["request_text"]:
        foot += "\n" + info["request_text"]
    if keys and keys["note"]:
        foot += "\n" + keys["note"]
    foot = "\n".join(w for line in foot.split("\n") for w in textwrap.wrap(line, 110))
    if ax is None:
        fig.suptitle(head, fontsize=11)
        _legend(fig, info, foot)
    else:
        ax.set_title("", loc="left")  # one panel: the head says it all, and would overlap
        ax.set_title(head, fontsize=10)
        # beside the axes, so it never covers a band
        ax.legend(handles=_legend_handles(info), fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.set_xlabel(ax.get_xlabel() + "\n" + foot, fontsize=8)
    fig.gml_blockmap = info  # what was drawn, for tests and the player
    if ax is None:
        # the figure is returned, and Jupyter shows a returned figure; closing it in pyplot
        # keeps the inline backend from showing it a second time at the end of the cell
        plt.close(fig)
    return fig


def _readable(segments):
    """More than ``GROUP_ABOVE`` segments: draw each group of equal segments once (see
    ``blockmap_groups``), most free memory first, and sum up the rest. -> (drawn segments in
    address order, left-out sentence, {drawn index: count} or {})."""
    if len(segments) <= GROUP_ABOVE:
        return segments, "", {}
    groups, left_out = group_segments(segments, MAP_ROWS)
    groups.sort(key=lambda g: g["segment"]["address"])
    return [g["segment"] for g in groups], left_out, {i: g["count"] for i, g in enumerate(groups)}


def plan_panels(segments, *, single: bool = False) -> list:
    """Group segments into panels: the large pool by size range (at most 3), then the small pool.

    Each panel is a dict: title, rows (segment numbers in address order) and max_bytes (scale).
    """
    if single or not segments:
        rows = sorted(range(len(segments)),
                      key=lambda i: (segments[i].get("segment_type") == "small", i))
        top = max((s["total_size"] for s in segments), default=0)
        return [{"title": "all segments" if segments else "no segments: nothing reserved",
                 "rows": rows, "max_bytes": top}]
    large = [i for i, s in enumerate(segments) if s.get("segment_type") != "small"]
    small = [i for i, s in enumerate(segments) if s.get("segment_type") == "small"]
    groups = []
    remaining = sorted(large, key=lambda i: -segments[i]["total_size"])
    while remaining:
        top = segments[remaining[0]]["total_size"]
        if len(groups) == MAX_LARGE_PANELS - 1:
            group, remaining = remaining, []
        else:
            group = [i for i in remaining if segments[i]["total_size"] * PANEL_RATIO >= top]
            remaining = [i for i in remaining if segments[i]["total_size"] * PANEL_RATIO < top]
        groups.append(sorted(group))
    panels = []
    for group in groups:
        sizes = [segments[i]["total_size"] for i in group]
        span = format_size(max(sizes)) if min(sizes) == max(sizes) else \
            f"{format_size(min(sizes))} to {format_size(max(sizes))}"
        scale = " (own scale)" if len(groups) > 1 else ""
        panels.append({"title": f"large pool: {count(len(group), 'segment')} of {span}{scale}",
                       "rows": group, "max_bytes": max(sizes)})
    if small:
        top = max(segments[i]["total_size"] for i in small)
        panels.append({"title": f"small pool (requests up to 1 MiB): {count(len(small), 'segment')} "
                                f"of {format_size(top)}", "rows": small, "max_bytes": top})
    return panels


def block_rects(segments, rows, *, merge_below: int = 0):
    """Rectangles per category for the given segment numbers: {category: (row, x0, x1) lists}.

    Offsets are bytes from the segment start; ``row`` is the band's position in ``rows``.
    With ``merge_below`` > 0 (dense maps, where no block edges are drawn), rounding slivers
    narrower than that many bytes join their block's blue, and touching rectangles of one
    colour become one: the picture is the same, with far fewer paths to draw.
    """
    rects = {name: ([], [], []) for name in BLOCK_STYLE}
    push = _push_merging if merge_below else _push
    for pos, index in enumerate(rows):
        seg = segments[index]
        offset = 0
        for block in seg["blocks"]:
            size, state = block["size"], block["state"]
            if state == "active_allocated":
                used = min(block.get("requested_size", size), size)
                if size - used < merge_below:
                    used = size
                push(rects["requested"], pos, offset, offset + used)
                if used < size:
                    push(rects["rounding"], pos, offset + used, offset + size)
            else:
                push(rects["pending" if state == "active_pending_free" else "free"],
                     pos, offset, offset + size)
            offset += size
    return rects


def _push(target, row, x0, x1):
    target[0].append(row)
    target[1].append(x0)
    target[2].append(x1)


def _push_merging(target, row, x0, x1):
    if target[0] and target[0][-1] == row and target[2][-1] == x0:
        target[2][-1] = x1
    else:
        _push(target, row, x0, x1)


def _polys(rows, x0, x1, unit, height=0.8, min_width=0.0):
    import numpy as np
    y = np.asarray(rows, dtype=float)
    a = np.asarray(x0, dtype=float) / unit
    b = np.maximum(np.asarray(x1, dtype=float) / unit, a + min_width)
    lo, hi = y - height / 2, y + height / 2
    return np.stack([np.stack([a, lo], -1), np.stack([a, hi], -1),
                     np.stack([b, hi], -1), np.stack([b, lo], -1)], axis=1)


def draw_blockmap(fig, axes, panels, segments, rules, *, request=None, stream=0,
                  highlight_largest=True, room=None, keys=None) -> dict:
    """Draw ``panels`` into ``axes``; return what was drawn (largest block, request fit).
    ``keys`` (``blockmap_keys.keyed_colours``): colour allocated blocks by their key."""
    info = blockmap_info(panels, segments, rules, request=request, stream=stream,
                         highlight_largest=highlight_largest, room=room)
    info["keys"] = keys
    drawn = set()
    for ax, panel in zip(axes, panels):
        setup_panel(ax, panel, segments)
        drawn |= {a.get_gid() for a in draw_panel_data(ax, panel, segments, info)}
    info["drawn"] = drawn   # artist gids: the legend lists only these
    return info


def blockmap_info(panels, segments, rules, *, request=None, stream=0, highlight_largest=True,
                  room=None):
    """What a block map marks besides the blocks: the largest free block and the request fit
    (``room``: what the driver has left, ``request_path.driver_room``)."""
    fit = find_fit(segments, request, rules, stream=stream) if request is not None else None
    return {"panels": panels, "fit": fit, "request": request,
            "largest": _largest_free(segments) if highlight_largest else None,
            "expandable": any(s.get("is_expandable") for s in segments),
            "request_text": "" if request is None else
            request_verdict(fit, segments, rules, request, stream, room)}


def setup_panel(ax, panel, segments) -> None:
    """The static part of a panel: limits, axis labels and the band names."""
    from matplotlib.ticker import FuncFormatter
    rows = panel["rows"]
    unit, unit_name = unit_for(max(panel["max_bytes"], 1))
    ax.set_xlim(0, max(panel["max_bytes"], 1) / unit)
    ax.set_ylim(len(rows) - 0.5 if rows else 0.5, -0.5)  # seg 0 at the top
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(f"offset within segment ({unit_name})", fontsize=8)
    ax.set_title(panel["title"], fontsize=9, loc="left")
    ax.tick_params(labelsize=7)
    if len(rows) > LABEL_ROWS:
        ax.set_ylabel("segments, address order", fontsize=8)
        ax.set_yticks([])
    else:
        ax.set_yticks(range(len(rows)))
        counts = panel.get("counts") or {}
        ax.set_yticklabels([f"{format_size(segments[i]['total_size'])} x{counts[i]}"
                            if counts else f"seg {i}  {format_size(segments[i]['total_size'])}"
                            for i in rows], fontsize=7)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def draw_panel_data(ax, panel, segments, info) -> list:
    """The blocks, outlines and marks of one panel; returns the artists added."""
    from matplotlib.collections import LineCollection, PolyCollection
    rows = panel["rows"]
    unit, _ = unit_for(max(panel["max_bytes"], 1))
    n_blocks = sum(len(segments[i]["blocks"]) for i in rows)
    # thin bands (many rows) or many blocks: edges and outlines would paint over the blocks, so
    # they are left out, and touching same-coloured rectangles and sub-pixel slivers are merged
    dense = n_blocks > 5000 or len(rows) > LABEL_ROWS
    rects = block_rects(segments, rows, merge_below=panel["max_bytes"] // 2000 if dense else 0)
    artists = []
    # free first, allocated last: a widened allocation must lie on top of the free block after it
    keys = info.get("keys")
    for name in reversed(list(BLOCK_STYLE)):
        colour, label = BLOCK_STYLE[name]
        r, a, b = rects[name]
        if name == "requested" and keys:
            r, a, b, names = keyed_rects(segments, rows, keys["by"])
            colour, name = [keys["colours"][k] for k in names], "keyed"
        if r:
            # a 512 B tensor in a 2 GiB band would be invisible: widen used blocks to a
            # hair (MIN_WIDTH of the axis) so that every allocation shows
            min_width = 0.0 if name == "free" else panel["max_bytes"] / unit * MIN_WIDTH
            coll = PolyCollection(_polys(r, a, b, unit, min_width=min_width),
                                  facecolors=colour, edgecolors="none", linewidths=0,
                                  label=label)
            coll.set_gid(f"blocks:{name}")
            artists.append(ax.add_collection(coll, autolim=False))
    if not dense and rows:
        artists += _block_edges(ax, segments, rows, unit, LineCollection)
    artists += _segment_outlines(ax, segments, rows, unit, PolyCollection, dense)
    largest, fit = info["largest"], info["fit"]
    if largest and largest["segment"] in rows:
        artists.append(_outline(ax, rows.index(largest["segment"]), largest["offset_bytes"],
                                largest["size_bytes"], unit, LARGEST_FREE_EDGE, "largest", 2.2))
    if fit and fit["segment"] in rows:
        artists.append(_outline(ax, rows.index(fit["segment"]), fit["offset_bytes"],
                                fit["take_bytes"], unit, REQUEST_COLOUR, "request", 2.0,
                                hatch="///"))
    return artists


def _largest_free(segments):
    best = None
    for index, seg in enumerate(segments):
        offset = 0
        for block in seg["blocks"]:
            if block["state"] == "inactive" and (best is None or block["size"] > best[0]):
                best = (block["size"], index, offset)
            offset += block["size"]
    if best is None:
        return None
    return {"size_bytes": best[0], "segment": best[1], "offset_bytes": best[2]}


def _block_edges(ax, segments, rows, unit, LineCollection):
    # thin white lines where one block ends and the next begins, so neighbours stay apart
    lines = []
    for pos, index in enumerate(rows):
        offset = 0
        for block in segments[index]["blocks"][:-1]:
            offset += block["size"]
            lines.append(((offset / unit, pos - 0.4), (offset / unit, pos + 0.4)))
    if lines:
        coll = LineCollection(lines, colors="white", linewidths=0.8)
        coll.set_gid("block_edges")
        return [ax.add_collection(coll, autolim=False)]
    return []


def _segment_outlines(ax, segments, rows, unit, PolyCollection, dense):
    plain = [] if dense else [(pos, segments[i]["total_size"]) for pos, i in enumerate(rows)
                              if not segments[i].get("is_expandable")]
    expandable = [(pos, segments[i]["total_size"]) for pos, i in enumerate(rows)
                  if segments[i].get("is_expandable")]
    out = []
    for group, colour, style, gid in ((plain, SEGMENT_EDGE, "solid", "segments"),
                                      (expandable, EXPANDABLE_EDGE, "dashed", "segments:expandable")):
        if group:
            verts = _polys([p for p, _ in group], [0] * len(group), [s for _, s in group], unit)
            coll = PolyCollection(verts, facecolors="none", edgecolors=colour,
                                  linewidths=0.6 if gid == "segments" or dense else 1.4,
                                  linestyles="solid" if dense else style)
            coll.set_gid(gid)
            out.append(ax.add_collection(coll, autolim=False))
    return out


def _outline(ax, row, offset, size, unit, colour, gid, width, hatch=None):
    from matplotlib.patches import Rectangle
    rect = Rectangle((offset / unit, row - 0.45), size / unit, 0.9, fill=False,
                     edgecolor=colour, linewidth=width, hatch=hatch, zorder=5)
    rect.set_gid(gid)
    return ax.add_patch(rect)


def _legend_handles(info):
    from matplotlib.patches import Patch
    drawn = info.get("drawn")
    handles = [Patch(facecolor=c, label=label) for name, (c, label) in BLOCK_STYLE.items()
               if drawn is None or f"blocks:{name}" in drawn]
    keys = info.get("keys")
    if keys and (drawn is None or "blocks:keyed" in drawn):
        shown = [k for k in keys["ranked"] if keys["colours"][k] != OTHER_COLOUR]
        handles[:0] = [Patch(facecolor=keys["colours"][k], label=f"allocated by {k}"
                             if keys["by"] == "frame" else f"allocated, {k}") for k in shown]
        if len(shown) < len(keys["ranked"]):
            handles.insert(len(shown), Patch(facecolor=OTHER_COLOUR, label=f"allocated, other "
                                             f"({len(keys['ranked']) - len(shown)} more)"))
    if info["expandable"]:
        handles.append(Patch(facecolor="none", edgecolor=EXPANDABLE_EDGE, linestyle="--",
                             label="expandable segment"))
    if info["largest"]:
        lg = info["largest"]
        handles.append(Patch(facecolor="none", edgecolor=LARGEST_FREE_EDGE, linewidth=2,
                             label=f"largest free block: {format_size(lg['size_bytes'])} "
                                   f"(seg {lg['segment']})"))
    if info["fit"]:
        handles.append(Patch(facecolor="none", edgecolor=REQUEST_COLOUR, hatch="///",
                             label=f"where the {format_size(info['fit']['request_bytes'])} "
                                   f"request would go"))
    return handles


def _legend(fig, info, foot):
    fig.legend(handles=_legend_handles(info), loc="outside lower center", ncols=3, fontsize=8,
               frameon=False, title=foot, title_fontsize=8)
