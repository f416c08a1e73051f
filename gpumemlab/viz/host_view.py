"""Pinned host memory drawn: the host map (``gml.show(..., host=True)``) and the host timeline
(``gml.timeline(..., host=True)``).

The host allocator (c10's ``CachingHostAllocatorImpl``) never splits a block and keeps one free
list per power of two (``size_index``), so its picture is not a band of blocks per segment but a
row per free list: how many bytes of that list are in use by what was asked for, lost to the
power-of-two rounding, waiting for a copy's event before they can be reused, or cached free. The
numbers under each row are computed from the snapshot's ``host_segments``; the timeline steps
through ``host_traces`` (pinned = ``segment_alloc`` minus ``segment_free``, in use = ``alloc``
minus ``free``). Nothing here is drawn for a snapshot without host entries: a one-line error
says how to record them.
"""
from __future__ import annotations

import textwrap

from gpumemlab.allocator.host.rounding import size_index
from gpumemlab.units import format_size

from .palette import BLOCK_STYLE, SEGMENT_EDGE, unit_for
from .source import read_source
from .words import count

# the shares of a free list's bytes, in the order a row draws them
SHARES = ("requested", "rounding waste", "awaiting event", "cached free")
# the block map's colours for the same states (viz.palette)
_SHARE_COLOUR = {
    "requested": BLOCK_STYLE["requested"][0],
    "rounding waste": BLOCK_STYLE["rounding"][0],
    "awaiting event": BLOCK_STYLE["pending"][0],
    "cached free": BLOCK_STYLE["free"][0],
}
_SHARE_LABEL = {"requested": BLOCK_STYLE["requested"][1], "rounding waste": BLOCK_STYLE["rounding"][1],
                "awaiting event": BLOCK_STYLE["pending"][1], "cached free": BLOCK_STYLE["free"][1]}
NO_HOST = ("this snapshot has no pinned host memory recorded (host_segments): record it with "
           "torch.cuda.memory._record_memory_history(record_pinned_host_memory=True) on "
           "PyTorch 2.14 or newer, or SimulatedGPU(record_pinned_host_memory=True)")


def host_segments(source) -> list:
    """The snapshot's host segments (ValueError naming how to record them when there are none)."""
    snap = read_source(source).snapshot
    if "host_segments" not in snap:
        raise ValueError(NO_HOST)
    return list(snap["host_segments"])


def free_lists(segments) -> list:
    """One row per power-of-two free list, smallest first: its bucket, block count and the bytes
    of each share (``SHARES``). A block's share: in use blocks split into what was requested
    and the rounding above it; ``active_pending_free`` blocks wait for an event; ``inactive``
    blocks are cached free."""
    rows = {}
    for seg in segments:
        for block in seg["blocks"]:
            index = size_index(block["size"])
            row = rows.setdefault(index, {"size_index": index, "blocks": 0,
                                          "pinned_bytes": 0, **{s: 0 for s in SHARES}})
            row["blocks"] += 1
            row["pinned_bytes"] += block["size"]
            state = block["state"]
            if state == "active_allocated":
                asked = min(block.get("requested_size", block["size"]), block["size"])
                row["requested"] += asked
                row["rounding waste"] += block["size"] - asked
            elif state == "active_pending_free":
                row["awaiting event"] += block["size"]
            else:
                row["cached free"] += block["size"]
    return [rows[k] for k in sorted(rows)]


def host_figures(segments) -> dict:
    """Totals over every host block: pinned, each share, and the block count."""
    return _totals(free_lists(segments))


def host_facts(snap: dict):
    """A snapshot dict's host figures (``host_figures`` and its host trace's length), or None
    when it has no host entries: what ``gpumemlab report`` and the doctor print."""
    if "host_segments" not in snap:
        return None
    return {**host_figures(snap["host_segments"]),
            "trace_entries": len(snap.get("host_traces") or [])}


def host_line(h: dict) -> str:
    """One line for ``host_facts``'s figures."""
    return (f"pinned host memory: {format_size(h['pinned_bytes'])} in "
            f"{count(h['blocks'], 'block')} "
            f"(requested {format_size(h['requested_bytes'])}, rounding waste "
            f"{format_size(h['rounding_waste_bytes'])}, awaiting a copy's event "
            f"{format_size(h['awaiting_event_bytes'])}, cached free "
            f"{format_size(h['cached_free_bytes'])}); {h['trace_entries']} host trace entries")


def _totals(lists) -> dict:
    out = {"pinned_bytes": sum(r["pinned_bytes"] for r in lists),
           "blocks": sum(r["blocks"] for r in lists)}
    for share in SHARES:
        out[share.replace(" ", "_") + "_bytes"] = sum(r[share] for r in lists)
    return out


def show_host(source, ax=None, *, title=None):
    """Draw the host map: a row per power-of-two free list, its bytes split into shares.

    Each row is drawn to its own full width (free lists run from 4 KiB to tens of GiB, so one
    scale would hide all but the largest); the row's label gives its absolute figures.
    Returns the matplotlib Figure (``fig.gml_host`` holds the rows drawn).
    """
    import matplotlib.pyplot as plt

    segments = host_segments(source)
    lists = free_lists(segments)
    totals = _totals(lists)
    if ax is None:
        fig = plt.figure(figsize=(10, 1.6 + 0.45 * max(1, len(lists))), layout="constrained")
        ax = fig.subplots()
        own = True
    else:
        fig, own = ax.figure, False
    labels = []
    for y, row in enumerate(lists):
        left = 0.0
        for share in SHARES:
            width = row[share] / row["pinned_bytes"] if row["pinned_bytes"] else 0.0
            if width:
                ax.barh(y, width, left=left, height=0.7, color=_SHARE_COLOUR[share],
                        edgecolor="white", linewidth=0.5)
            left += width
        waste = f", {format_size(row['rounding waste'])} rounding waste" if row["rounding waste"] \
            else ""
        labels.append(f"{format_size(2 ** row['size_index'])} list: {row['blocks']} block"
                      f"{'s' if row['blocks'] != 1 else ''}, {format_size(row['pinned_bytes'])}"
                      f" pinned{waste}")
    ax.set_yticks(range(len(lists)), labels, fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, max(0, len(lists) - 1) + 0.6)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
    ax.set_xlabel("share of the free list's pinned bytes")
    head = title or "pinned host memory by free list"
    ax.set_title("\n".join(textwrap.wrap(
        f"{head}: {format_size(totals['pinned_bytes'])} pinned in "
        f"{count(totals['blocks'], 'block')}, "
        f"{format_size(totals['requested_bytes'])} requested, "
        f"{format_size(totals['rounding_waste_bytes'])} rounding waste", 90)), fontsize=10)
    from matplotlib.patches import Patch

    # named as the block map names the same states, so a category has one name and one colour
    ax.legend(handles=[Patch(color=_SHARE_COLOUR[s], label=_SHARE_LABEL[s]) for s in SHARES], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.gml_host = {"free_lists": lists, **totals}
    if own:
        plt.close(fig)  # returned, so Jupyter shows it once
    return fig


def host_timeline_data(source) -> dict:
    """Pinned, held and in-use host bytes after each ``host_traces`` entry: pinned steps at
    ``segment_alloc``/``segment_free``; in use at ``alloc``/``free_requested`` (the tensor let
    go); held until ``free_completed`` (its copies' events done, the block reusable)."""
    snap = read_source(source).snapshot
    if "host_traces" not in snap:
        raise ValueError(NO_HOST)
    pinned = used = held = 0
    out = {"event": [], "action": [], "pinned_bytes": [], "in_use_bytes": [], "held_bytes": []}
    # (pinned, in use, held) steps of each action; 'free' is the device trace's one-step free
    step = {"segment_alloc": (1, 0, 0), "segment_free": (-1, 0, 0), "alloc": (0, 1, 1),
            "free_requested": (0, -1, 0), "free_completed": (0, 0, -1), "free": (0, -1, -1)}
    for i, entry in enumerate(snap["host_traces"]):
        dp, du, dh = step.get(entry["action"], (0, 0, 0))
        pinned += dp * entry["size"]
        used += du * entry["size"]
        held += dh * entry["size"]
        out["event"].append(i)
        out["action"].append(entry["action"])
        out["pinned_bytes"].append(pinned)
        out["in_use_bytes"].append(used)
        out["held_bytes"].append(held)
    return out


def host_timeline(source, ax=None):
    """Plot pinned and in-use host memory over the host trace entries; returns the Figure
    (``fig.gml_host_timeline`` holds the series)."""
    import matplotlib.pyplot as plt

    data = host_timeline_data(source)
    if ax is None:
        fig = plt.figure(figsize=(10, 3.6), layout="constrained")
        ax, own = fig.subplots(), True
    else:
        fig, own = ax.figure, False
    top = max(data["pinned_bytes"] + data["in_use_bytes"] + [1])
    scale, unit = unit_for(top)
    ax.step(data["event"], [b / scale for b in data["pinned_bytes"]], where="post",
            label="pinned (cudaHostAlloc'd)", color=SEGMENT_EDGE, linewidth=2.5, alpha=0.5)
    ax.step(data["event"], [b / scale for b in data["in_use_bytes"]], where="post",
            label="in use by tensors", color=_SHARE_COLOUR["requested"])
    ax.step(data["event"], [b / scale for b in data["held_bytes"]], where="post",
            label="in use or awaiting a copy's event", color=_SHARE_COLOUR["awaiting event"],
            linestyle="--")
    ax.set_xlabel("host trace entry")
    ax.set_ylabel(unit)
    peak = max(data["pinned_bytes"] or [0])
    ax.set_title(f"pinned host memory over {len(data['event'])} host trace entries "
                 f"(peak pinned {format_size(peak)})", fontsize=10)
    ax.legend(fontsize=8)
    fig.gml_host_timeline = data
    if own:
        plt.close(fig)
    return fig
