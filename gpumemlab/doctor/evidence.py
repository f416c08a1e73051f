"""The evidence at an OOM, read from the allocator state a replay stopped in.

For the request that failed: the largest cached free block of its pool and stream (c10 searches
only those, ``get_free_block``), the free bytes per segment, the live blocks that share a segment
with free memory (they are what keeps c10 ``release_cached_blocks`` from returning the segment)
and the code that allocated them (:func:`gpumemlab.viz.frames.culprit_frame`, which skips
PyTorch's own frames), and whether the segments are expandable.
"""
from __future__ import annotations

from gpumemlab.allocator.constants import K_SMALL_SIZE
from gpumemlab.units import format_size
from gpumemlab.viz.frames import frame_text
from gpumemlab.viz.words import count

__all__ = ["allocation_frames", "evidence_lines", "state_evidence"]

TOP = 5


def allocation_frames(trace, stop: int, start_segments) -> dict:
    """recorded address -> frames of the allocation live there at entry ``stop``.

    Allocations made by the trace carry their entry's frames; those live since before the
    recording began carry the frames of their block in the snapshot's final segments.
    """
    frames = {}
    for seg in start_segments:
        for b in seg["blocks"]:
            if b["state"] != "inactive" and b.get("frames"):
                frames[b["address"]] = b["frames"]
    for k in range(min(stop, len(trace))):
        e = trace[k]
        if e["action"] == "alloc":
            frames[e["addr"]] = e.get("frames") or []
    return frames


def state_evidence(segments, request: int, stream: int, frames_at, shift: int = 0) -> dict:
    """Facts about ``segments`` (a ``_snapshot()`` segment list) against a ``request`` (rounded
    bytes) on ``stream``. ``frames_at`` maps a recorded address to frames; ``shift`` is the
    replay's address shift (model address = recorded + shift)."""
    pool = "small" if request <= K_SMALL_SIZE else "large"
    largest = None
    per_segment = []
    for seg in segments:
        free = [b for b in seg["blocks"] if b["state"] == "inactive"]
        free_bytes = sum(b["size"] for b in free)
        usable = seg["segment_type"] == pool and seg.get("stream", 0) == stream
        for b in free:
            if usable and (largest is None or b["size"] > largest["size"]):
                largest = {"size": b["size"], "address": b["address"] - shift,
                           "segment": seg["address"] - shift}
        if free_bytes:
            live = [b for b in seg["blocks"] if b["state"] != "inactive"]
            per_segment.append({
                "address": seg["address"] - shift, "total_size": seg["total_size"],
                "free_bytes": free_bytes, "free_blocks": len(free),
                "largest_free_bytes": max(b["size"] for b in free),
                "pool": seg["segment_type"], "stream": seg.get("stream", 0),
                "expandable": bool(seg.get("is_expandable")),
                "pinned_by": [_pinning(b, frames_at, shift) for b in
                              sorted(live, key=lambda b: -b["size"])[:3]],
                "live_blocks": len(live)})
    per_segment.sort(key=lambda s: (-s["free_bytes"], s["address"]))
    return {"pool": pool, "stream": stream, "request_bytes": request,
            "largest_free_block": largest, "segments_with_free": len(per_segment),
            "free_by_segment": per_segment[:TOP],
            "expandable_segments": sum(bool(s.get("is_expandable")) for s in segments),
            "segments": len(segments)}


def _pinning(block, frames_at, shift):
    recorded = block["address"] - shift
    frames = frames_at.get(recorded) or block.get("frames") or []
    return {"address": recorded, "size": block["size"], "state": block["state"],
            "allocated_at": frame_text(frames)}


def evidence_lines(ev: dict) -> list:
    """The evidence as sentences for the text report."""
    out = []
    req = format_size(ev["request_bytes"])
    big = ev["largest_free_block"]
    if big is None:
        out.append(f"request {req} ({ev['pool']} pool, stream {ev['stream']}): no cached free "
                   f"block of that pool and stream at all")
    else:
        out.append(f"request {req} ({ev['pool']} pool, stream {ev['stream']}) vs the largest "
                   f"cached free block there: {format_size(big['size'])} at {big['address']:#x}")
    out.append(f"{ev['segments_with_free']} of {ev['segments']} segments hold free memory"
               + (f"; {ev['expandable_segments']} are expandable" if ev["expandable_segments"]
                  else "; none is expandable"))
    for s in ev["free_by_segment"]:
        pins = "; ".join(f"{format_size(p['size'])} from {p['allocated_at']}" for p in s["pinned_by"])
        out.append(f"  segment {s['address']:#x} ({format_size(s['total_size'])}, {s['pool']}): "
                   f"{format_size(s['free_bytes'])} free in {count(s['free_blocks'], 'block')}, kept by "
                   f"{count(s['live_blocks'], 'live block')}: {pins or '-'}")
    return out
