"""Keep a block map of a thousand segments readable: equal segments become one row with a count,
the rows are ordered by what matters at an OOM (free memory held, then size), and what is left
out is summed up in one line instead of being squeezed into rows under a pixel.

Two segments are equal when they have the same size, pool, stream, expandability and the same
sequence of (block size, state): a real recording of a large model often holds hundreds of
identical weight segments.
"""
from __future__ import annotations

from gpumemlab.units import format_size

__all__ = ["group_segments", "segment_key"]


def segment_key(seg) -> tuple:
    return (seg["total_size"], seg.get("segment_type"), seg.get("stream", 0),
            bool(seg.get("is_expandable")), tuple((b["size"], b["state"]) for b in seg["blocks"]))


def _free(seg) -> int:
    return sum(b["size"] for b in seg["blocks"] if b["state"] == "inactive")


def group_segments(segments, max_rows: int):
    """-> (groups, left_out): at most ``max_rows`` groups ``{"segment", "count", "total_size",
    "free_bytes", "addresses"}`` (the first segment of each group stands for all), most free
    memory first, then largest; ``left_out`` is "" or a sentence summing the segments not shown."""
    groups = {}
    for seg in sorted(segments, key=lambda s: s["address"]):
        g = groups.setdefault(segment_key(seg), {"segment": seg, "count": 0, "addresses": []})
        g["count"] += 1
        g["addresses"].append(seg["address"])
    rows = list(groups.values())
    for g in rows:
        g["total_size"] = g["segment"]["total_size"]
        g["free_bytes"] = _free(g["segment"])
    rows.sort(key=lambda g: (-g["free_bytes"] * g["count"], -g["total_size"], g["addresses"][0]))
    shown, rest = rows[:max_rows], rows[max_rows:]
    if not rest:
        return shown, ""
    n = sum(g["count"] for g in rest)
    reserved = sum(g["total_size"] * g["count"] for g in rest)
    free = sum(g["free_bytes"] * g["count"] for g in rest)
    return shown, (f"{n} more segments not drawn ({format_size(reserved)} reserved, "
                   f"{format_size(free)} of it free)")
