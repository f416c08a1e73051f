"""Checks a snapshot's segments must pass beyond their keys: typed fields and no overlaps.

``normalize_snapshot`` calls these with its walker (``w.fail(where, problem)`` raises a
``SnapshotError`` naming the file and the entry), so a hand-edited or badly merged file is an
error, never "verified".
"""
from __future__ import annotations

__all__ = ["check_segment_types", "check_no_overlap"]


def check_segment_types(w, seg, where):
    """``device``/``stream`` integers, ``is_expandable`` a bool, ``segment_type`` small/large."""
    for key in ("device", "stream"):
        value = seg[key]
        if isinstance(value, bool) or not isinstance(value, int):
            w.fail(where, f"{key!r} is {type(value).__name__}, expected an integer")
    if not isinstance(seg["is_expandable"], bool):
        w.fail(where, f"'is_expandable' is {type(seg['is_expandable']).__name__}, expected a bool")
    if seg.get("segment_type", "large") not in ("small", "large"):
        w.fail(where, f"'segment_type' is {seg['segment_type']!r}, expected 'small' or 'large'")


def check_no_overlap(w, segments):
    """Two segments of one device never share an address (each is its own cudaMalloc or
    mapped range): a duplicate or an overlap means the file was edited or merged badly."""
    order = sorted(range(len(segments)), key=lambda i: (segments[i]["device"],
                                                        segments[i]["address"]))
    for a, b in zip(order, order[1:]):
        sa, sb = segments[a], segments[b]
        if sa["device"] == sb["device"] and sb["address"] < sa["address"] + sa["total_size"]:
            what = "duplicates" if sb["address"] == sa["address"] else "overlaps"
            w.fail(f"segment {b}", f"at {sb['address']:#x} {what} segment {a} "
                                   f"({sa['address']:#x}, {sa['total_size']} bytes)")
