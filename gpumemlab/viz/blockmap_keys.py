"""Block maps coloured by who made each block (``gml.show(source, by="frame" | "size")``): the
requested part of every allocated block takes the colour of its key, the same keys and palette
as the per-allocation timeline (``active_timeline``): the first frame of the user's code that
allocated it, or its size class. A snapshot's blocks carry the frames of the allocation that made
them (``torch.cuda.memory._record_memory_history(context="alloc" or "all")``), not the category
``gml.capture`` gives its trace entries, so ``by="category"`` is coloured by size and says so, as
is a snapshot recorded without frames.
"""
from __future__ import annotations

from gpumemlab.viz.active_timeline import KEYS, _frame_key, _size_class, key_colours


def block_key(block, by: str) -> str:
    if by == "frame":
        return _frame_key(block.get("frames")) or "(no frames)"
    return _size_class(min(block.get("requested_size", block["size"]), block["size"]))


def keyed_colours(segments, by: str) -> dict:
    """{"by", "colours" (key -> colour), "ranked", "note"} over the allocated blocks."""
    if by not in KEYS:
        raise ValueError(f"by must be one of {', '.join(KEYS)}, got {by!r}")
    blocks = [b for s in segments for b in s["blocks"] if b["state"] == "active_allocated"]
    note = ""
    if by == "category":
        by, note = "size", ("a snapshot's blocks carry no categories (a capture's trace does: "
                            "gml.timeline(capture, by='category')), so blocks are coloured by size")
    elif by == "frame" and not any(b.get("frames") for b in blocks):
        by, note = "size", ("this snapshot's blocks have no stack frames, so they are coloured by "
                            "size (record with context='alloc' or 'all' to see the code)")
    total = {}
    for b in blocks:
        key = block_key(b, by)
        total[key] = total.get(key, 0) + b["size"]
    colours, ranked = key_colours(total)
    return {"by": by, "colours": colours, "ranked": ranked, "note": note}


def keyed_rects(segments, rows, by: str) -> tuple:
    """(rows, starts, ends, keys) of the requested part of every allocated block in ``rows``."""
    r, a, b, keys = [], [], [], []
    for pos, index in enumerate(rows):
        offset = 0
        for block in segments[index]["blocks"]:
            size = block["size"]
            if block["state"] == "active_allocated":
                r.append(pos)
                a.append(offset)
                b.append(offset + min(block.get("requested_size", size), size))
                keys.append(block_key(block, by))
            offset += size
    return r, a, b, keys


__all__ = ["block_key", "keyed_colours", "keyed_rects"]
