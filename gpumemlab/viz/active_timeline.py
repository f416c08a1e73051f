"""The per-allocation memory timeline: every live allocation a band, stacked, over the events of a
recording, coloured by the code that made it (``gml.timeline(source, by="frame")``).

It follows the idea of the "Active Memory Timeline" of PyTorch's viewer (``MemoryViz.js`` in
``torch/utils/viz``): an ``alloc`` entry puts a band of its size (the size the caller asked
for, as the trace records it; the block under it is rounded up) on top of the stack; when a
block's free completes (``free_completed``; ``free_requested`` in recordings that have no
completions) its band ends and every band above it moves down by its size. The top of the stack
is the requested memory alive; the dashed line above it is what the allocator reserved (the cache
and the rounding are the gap between them), drawn where the recording has segments (a CPU
capture has none until it is replayed). Allocations alive before the first entry (a recording that began mid-run)
start at the left edge.

Colours: ``by="frame"`` the allocating function (the first frame of the user's code, as
``gpumemlab.viz.frames.culprit_frame`` picks it), ``"category"`` the category ``gml.capture``
records (parameter, gradient, activation, optimizer_state, ...), ``"size"`` the request's size
class. The keys that allocated the most bytes get their own colour, the rest are "other". Steps are
marked where an entry's ``user_metadata`` changes (``torch.cuda.memory._set_memory_metadata``,
``Capture.set_memory_metadata``), or at the event indices given as ``steps``.
"""
from __future__ import annotations

import sys

from gpumemlab.units import format_size
from gpumemlab.viz.frames import culprit_frame
from gpumemlab.viz.history import History
from gpumemlab.viz.palette import SERIES_STYLE, unit_for

RESERVED = SERIES_STYLE["reserved_bytes"][0]   # "reserved" has one colour in every figure

KEYS = ("frame", "category", "size")
MAX_COLOURS = 12          # keys with a colour of their own; the rest are "other"
_SIZE_CLASSES = ((1 << 20, "up to 1 MiB (small pool)"), (10 << 20, "1 to 10 MiB"),
                 (100 << 20, "10 to 100 MiB"), (1 << 30, "100 MiB to 1 GiB"))


def _size_class(nbytes: int) -> str:
    for limit, name in _SIZE_CLASSES:
        if nbytes <= limit:
            return name
    return "over 1 GiB"


def _frame_key(frames) -> str | None:
    f = culprit_frame(frames)
    if f is None:
        return None
    # a comprehension or generator expression has a frame of its own (<listcomp>, <genexpr>
    # before Python 3.12): name the function that holds it, the next frame out in the same file
    frames = list(frames or ())
    k = next((i for i, g in enumerate(frames) if g is f), None)
    while k is not None and str(f.get("name") or "").startswith("<") and k + 1 < len(frames) \
            and isinstance(frames[k + 1], dict) \
            and frames[k + 1].get("filename") == f.get("filename"):
        k += 1
        f = frames[k]
    path = str(f.get("filename") or "?").replace("\\", "/")
    if "/ipykernel_" in path:
        # code typed in a notebook runs from the kernel's temporary file (/tmp/ipykernel_NNN/NNN.py):
        # its name means nothing to a reader; the line of the cell does, named as IPython's
        # tracebacks name it ("Cell In[5], line 14") when this kernel ran that cell
        cell = _cell_name(str(f.get("filename")))
        where = f"cell {cell}" if cell else "a notebook cell"
        return f"{f.get('name')} (line {f.get('line')} of {where})"
    return f"{f.get('name')} ({path.rsplit('/', 1)[-1]}:{f.get('line')})"


def _cell_name(path: str):
    """IPython's name for the cell that ran from ``path`` ("In[5]"), or None outside IPython or
    for a cell this kernel did not run (a snapshot recorded elsewhere)."""
    ipython = sys.modules.get("IPython")      # never imported here: only where it already runs
    try:
        named = ipython.get_ipython().compile.format_code_name(path)
    except AttributeError:                     # no IPython, no shell, or an IPython without it
        return None
    return named[1] if named else None


def bands(source, *, by: str = "frame", device=None) -> dict:
    """The stacked bands of a recording as plain data.

    Returns a dict: ``bands`` (each: key, size, start and end event, ``offsets`` as
    [(event, bytes below it)] change points), ``reserved`` (bytes after each event), ``marks``
    ([(event, user_metadata)] where it changes), ``by`` (the key used) and ``note`` (why a key
    was replaced, or "")."""
    if by not in KEYS:
        raise ValueError(f"by must be one of {', '.join(KEYS)}, got {by!r}")
    history = source if isinstance(source, History) else History(source, device=device)
    events = history.events
    note = ""
    if by == "frame" and not any(e.get("frames") for e in events):
        by, note = "size", ("this recording has no stack frames, so bands are coloured by size "
                            "(record with context='all' to see the allocating code)")
    if by == "category" and not any(e.get("category") for e in events):
        by, note = "size", ("this recording has no categories (gml.capture records them), so "
                            "bands are coloured by size")

    def key_of(entry, size):
        if by == "frame":
            return _frame_key(entry.get("frames")) or "(no frames)"
        if by == "category":
            return entry.get("category") or "(no category)"
        return _size_class(size)

    live, done, order = {}, [], []     # address -> band; bands in stacking order
    allocated_in_trace = {e.get("addr") for e in events if e.get("action") == "alloc"}
    # blocks alive before the first entry: freed in the trace before any alloc there, or still
    # allocated at the end and never allocated in the trace
    seen_alloc = set()
    for e in events:
        addr, action = e.get("addr"), e.get("action")
        if action == "alloc":
            seen_alloc.add(addr)
        elif action in ("free_requested", "free_completed") and addr not in seen_alloc \
                and addr not in live:
            live[addr] = {"key": key_of(e, e.get("size", 0)), "size": int(e.get("size", 0)),
                          "start": -1, "end": None, "offsets": []}
    for seg in history.final_segments:
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated" and b["address"] not in allocated_in_trace \
                    and b["address"] not in live:
                live[b["address"]] = {"key": key_of(b, b["size"]), "size": int(b["size"]),
                                      "start": -1, "end": None, "offsets": []}
    order = list(live.values())
    top = 0
    for band in order:
        band["offsets"].append((-1, top))
        top += band["size"]
    peak = top
    completes = any(e.get("action") == "free_completed" for e in events)
    free_action = "free_completed" if completes else "free_requested"
    marks, metadata = [], None
    for i, e in enumerate(events):
        action = e.get("action")
        meta = e.get("user_metadata")
        if meta and meta != metadata:
            marks.append((i, str(meta)))
            metadata = meta
        if action == "alloc":
            band = {"key": key_of(e, e.get("size", 0)), "size": int(e.get("size", 0)),
                    "start": i, "end": None, "offsets": [(i, top)]}
            live[e.get("addr")] = band
            order.append(band)
            top += band["size"]
            peak = max(peak, top)
        elif action == free_action and e.get("addr") in live:
            band = live.pop(e.get("addr"))
            band["end"] = i
            k = order.index(band)
            for above in order[k + 1:]:
                above["offsets"].append((i, above["offsets"][-1][1] - band["size"]))
            del order[k]
            top -= band["size"]
            done.append(band)
    last = len(events) - 1
    for band in order:
        band["end"] = last + 1 if last >= 0 else 0
    return {"bands": done + order, "reserved": list(history.totals["reserved_bytes"]),
            "marks": marks, "by": by, "note": note, "events": len(events),
            "peak_allocated": peak}


OTHER_COLOUR = (0.75, 0.75, 0.75, 1.0)


def key_colours(total: dict) -> tuple:
    """(key -> colour, keys ranked by bytes): the MAX_COLOURS keys with the most bytes get tab20's
    colours in that order, the rest grey ("other"). Shared by this timeline and the block map."""
    ranked = sorted(total, key=lambda k: -total[k])
    import matplotlib
    cmap = matplotlib.colormaps["tab20"]
    colours = {k: cmap(i % 20) for i, k in enumerate(ranked[:MAX_COLOURS])}
    for k in ranked[MAX_COLOURS:]:
        colours[k] = OTHER_COLOUR
    return colours, ranked


def _colours(data) -> tuple:
    total = {}
    for band in data["bands"]:
        total[band["key"]] = total.get(band["key"], 0) + band["size"]
    colours, ranked = key_colours(total)
    if data.get("by") == "category":   # a category keeps its colour from figure to figure
        from gpumemlab.viz.palette import CATEGORY_COLOURS
        colours.update({k: CATEGORY_COLOURS[k] for k in ranked[:MAX_COLOURS] if k in CATEGORY_COLOURS})
    return colours, ranked


def draw_active_timeline(source, ax=None, *, by: str = "frame", steps=None, device=None):
    """Draw the stacked per-allocation timeline; returns the Figure (``fig.gml_timeline`` holds
    the data of :func:`bands`, with ``colours`` and ``step_note``)."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter
    data = bands(source, by=by, device=device)
    own = ax is None
    if own:
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
    else:
        fig = ax.figure
    n = data["events"]
    reserved = data["reserved"]
    peak_alloc = data["peak_allocated"]
    top = max(max(reserved, default=0), peak_alloc, 1)
    unit, unit_name = unit_for(top)
    colours, ranked = _colours(data)
    polys, faces = [], []
    for band in data["bands"]:
        x0, x1 = max(band["start"], -1) + 0.5, band["end"] + 0.5
        points = band["offsets"] + [(band["end"], None)]
        bottom = []
        for (t, off), (t_next, _) in zip(points, points[1:]):
            a, b = max(t, -1) + 0.5, t_next + 0.5
            bottom += [(a, off / unit), (b, off / unit)]
        bottom[0] = (x0, bottom[0][1])
        bottom[-1] = (x1, bottom[-1][1])
        upper = [(x, y + band["size"] / unit) for x, y in reversed(bottom)]
        polys.append(bottom + upper)
        faces.append(colours[band["key"]])
    # thin white edges tell neighbouring bands of one colour apart, while there are few enough
    edges = dict(edgecolors="white", linewidths=0.3) if len(polys) <= 500 else dict(edgecolors="none")
    ax.add_collection(PolyCollection(polys, facecolors=faces, gid="bands", **edges))
    reserved = reserved if any(reserved) else []
    if reserved:
        ax.plot(range(n), [r / unit for r in reserved], drawstyle="steps-post", color=RESERVED,
                lw=1.0, ls="--", gid="reserved", label="reserved")
    step_events = list(steps) if steps is not None else [m[0] for m in data["marks"]]
    for k, i in enumerate(step_events):
        ax.axvline(i - 0.5, color="black", lw=0.6, alpha=0.6, gid="step")
        label = data["marks"][k][1] if steps is None else f"step {k}"
        ax.annotate(label, (i - 0.5, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                    rotation=90, va="top", ha="right")
    step_note = "" if step_events else ("no steps marked: call "
                                        "torch.cuda.memory._set_memory_metadata('step N') at each "
                                        "step (gml.capture: Capture.set_memory_metadata), or pass steps=[...]")
    ax.set_xlim(-0.5, max(n, 1) - 0.5)
    ax.set_ylim(0, top / unit * 1.05)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("event")
    ax.set_ylabel(f"live allocations ({unit_name}, as requested)")
    handles = [Patch(facecolor=colours[k], label=k) for k in ranked[:MAX_COLOURS]]
    if len(ranked) > MAX_COLOURS:
        handles.append(Patch(facecolor=OTHER_COLOUR,
                             label=f"other ({len(ranked) - MAX_COLOURS} more)"))
    if reserved:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color=RESERVED, ls="--", label="reserved"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title=f"by {data['by']}", title_fontsize=8)
    title = (f"live allocations by {data['by']}: {len(data['bands'])} allocations, peak "
             f"{format_size(peak_alloc)} requested"
             + (f", {format_size(max(reserved))} reserved" if reserved else ""))
    ax.set_title(title, fontsize=9, loc="left")
    notes = [t for t in (data["note"], step_note) if t]
    if notes:
        ax.text(0.0, -0.18, "; ".join(notes), transform=ax.transAxes, fontsize=7, va="top",
                color="#444444", wrap=True)
    data.update(colours={k: colours[k] for k in ranked}, step_note=step_note)
    fig.gml_timeline = data
    if own:
        plt.close(fig)  # returned, so Jupyter shows it once (as memory_timeline.timeline does)
    return fig


__all__ = ["bands", "draw_active_timeline", "key_colours", "KEYS"]
