"""The page map of expandable segments (``gml.page_map``): each segment's reserved virtual range
drawn as its pages, mapped or not, at chosen events of a recorded trace.

With ``expandable_segments:True`` c10's ``ExpandableSegment`` reserves one large virtual range
and maps 20 MiB physical pages (2 MiB in the small pool) into it as tensors need them; when
memory runs short, ``release_cached_blocks`` unmaps the pages of free holes (``unmap_block``),
which hands their physical memory back, and the range keeps its shape. The block map draws each
mapped run as a band of its own, as PyTorch's snapshot reports it; this view draws the virtual
range itself: unmapped pages (white, hatched: address space only, no memory), mapped pages that
hold no tensor (grey: physical memory, cached free) and the tensors (blue) on top. Rows share one
scale, so "before" and "after" an unmap line up page for page.
"""
from __future__ import annotations

from gpumemlab.units import format_size
from gpumemlab.viz.palette import BLOCK_STYLE, SEGMENT_EDGE, unit_for
from .reservations import Reservations, page_size, reserved_span
from .words import count

UNMAPPED_EDGE = "#AAAAAA"


def page_map(source, events=None, *, labels=None, device=None):
    """Draw the expandable segments of ``source`` (a device, snapshot with history, replay result
    or :class:`History`) after each event in ``events`` (default: the last), one row per event.

    Returns the matplotlib Figure; ``fig.gml_pages`` holds, per row, the pages drawn:
    ``{"event", "label", "page_bytes", "mapped": [bool per page], "used": [bool per page]}``.
    """
    from .history import History
    history = source if isinstance(source, History) else History(source, device=device)
    n = len(history)
    events = [n - 1] if events is None else list(events)
    labels = list(labels) if labels is not None else [f"after event {k}" for k in events]
    if len(labels) != len(events):
        raise ValueError(f"got {len(labels)} labels for {len(events)} events")
    reservations, extent = _reservations(history)
    if not reservations.bases:
        raise ValueError("no expandable segment in this trace: record with "
                         "alloc_conf='expandable_segments:True'")
    base, stream, pool, name = reservations.bases[0]
    page = page_size(pool)
    extent = -(-extent[base] // page) * page
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(events), 1, figsize=(10, 0.6 + 1.25 * len(events)),
                             layout="constrained", sharex=True, squeeze=False)
    unit, unit_name = unit_for(extent)
    fig.gml_pages = []
    for ax, k, label in zip(axes[:, 0], events, labels):
        state = history.goto(k)
        mapped, used = _pages(state, base, extent, page)
        _draw_row(ax, state, base, extent, page, unit, mapped)
        fig.gml_pages.append({"event": k, "label": label, "page_bytes": page,
                              "mapped": mapped, "used": used})
        ax.set_title(f"{label}: {sum(mapped)} of the {count(len(mapped), 'page')} drawn are mapped "
                     f"({format_size(sum(mapped) * page)}), {sum(used)} hold tensors",
                     fontsize=9, loc="left")
    span = reserved_span(history.source.total_memory, pool)
    axes[-1, 0].set_xlabel(f"offset in {name}'s reserved virtual range ({unit_name}); "
                           f"one cell = one {format_size(page)} page"
                           + (f"; the range reserves {format_size(span)} in all" if span else ""),
                           fontsize=8)
    _legend(fig)
    plt.close(fig)   # returned: Jupyter shows it once
    return fig


def _reservations(history):
    """The reservations of the trace and, per base, the furthest byte ever mapped."""
    res = Reservations(history.source.total_memory)
    extent = {}
    state = history.initial
    for address in state.addrs:
        seg = state.segs[address]
        if seg.expandable:
            held = res.find(address, seg.stream, seg.pool) or \
                res.add(address, seg.stream, seg.pool, f"seg_{len(res.bases)}")
            extent[held[0]] = max(extent.get(held[0], 0), seg.end - held[0])
    for i, e in enumerate(history.events):
        if e.get("action") != "segment_map":
            continue
        addr, stream, pool = e.get("addr", 0), e.get("stream", 0), history._pool_hint(i)
        held = res.find(addr, stream, pool) or res.add(addr, stream, pool,
                                                        f"seg_{len(res.bases)}")
        extent[held[0]] = max(extent.get(held[0], 0), addr + e.get("size", 0) - held[0])
    return res, extent


def _pages(state, base, extent, page):
    """Per page of [base, base + extent): is it mapped, does a live block touch it."""
    count = extent // page
    mapped, used = [False] * count, [False] * count
    for address in state.addrs:
        seg = state.segs[address]
        if not seg.expandable or seg.end <= base or seg.address >= base + extent:
            continue
        for p in range((seg.address - base) // page, min(count, (seg.end - base) // page)):
            mapped[p] = True
        for a in seg.starts:
            size = seg.blocks[a][0] or 0
            for p in range((a - base) // page, min(count, -(-(a + size - base) // page))):
                used[p] = True
    return mapped, used


def _draw_row(ax, state, base, extent, page, unit, mapped):
    from matplotlib.collections import PolyCollection
    free_colour = BLOCK_STYLE["free"][0]
    blue = BLOCK_STYLE["requested"][0]

    def rect(x0, x1, lo=-0.4, hi=0.4):
        return [(x0 / unit, lo), (x0 / unit, hi), (x1 / unit, hi), (x1 / unit, lo)]
    cells_mapped = [rect(i * page, (i + 1) * page) for i, m in enumerate(mapped) if m]
    cells_unmapped = [rect(i * page, (i + 1) * page) for i, m in enumerate(mapped) if not m]
    ax.add_collection(PolyCollection(cells_unmapped, facecolors="white", edgecolors=UNMAPPED_EDGE,
                                     linewidths=0.3, hatch="////", gid="pages:unmapped"))
    ax.add_collection(PolyCollection(cells_mapped, facecolors=free_colour, edgecolors="white",
                                     linewidths=0.3, gid="pages:mapped"))
    tensors = []
    for address in state.addrs:
        seg = state.segs[address]
        if seg.expandable and base <= seg.address < base + extent:
            for a in seg.starts:
                size = seg.blocks[a][0] or 0
                tensors.append(rect(a - base, a - base + size, -0.28, 0.28))
    ax.add_collection(PolyCollection(tensors, facecolors=blue, edgecolors=SEGMENT_EDGE,
                                     linewidths=0.6, gid="pages:tensors"))
    ax.set_xlim(0, extent / unit)
    ax.set_ylim(-0.6, 0.6)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(labelsize=7)


def _legend(fig):
    from matplotlib.patches import Patch
    handles = [Patch(facecolor="white", edgecolor=UNMAPPED_EDGE, hatch="////",
                     label="unmapped page: address space only, no memory"),
               Patch(facecolor=BLOCK_STYLE["free"][0], label="mapped page: physical memory"),
               Patch(facecolor=BLOCK_STYLE["requested"][0], edgecolor=SEGMENT_EDGE,
                     label="a tensor (live block)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
