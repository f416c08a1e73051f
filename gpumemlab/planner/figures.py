"""Figures read off one traced step and its replay: peaks per step, bytes by category at the peak,
parameter count. Pure functions over a ``Capture`` (its ``trace``) and a ``ReplayResult`` (its
``timeline``, one row per trace entry)."""
from __future__ import annotations

from gpumemlab.recordings.capture import CATEGORIES

__all__ = ["per_step", "by_category_at_peak", "parameter_bytes", "peak_live"]


def per_step(capture, result) -> list:
    """``[{"step", "peak_allocated_bytes", "peak_reserved_bytes"}]`` for each ``step i`` tag, in
    order; the entries before the first tag (what existed before the steps) count as "before"."""
    trace, tl = capture.trace, result.timeline
    out, index = [], {}
    for i in range(min(len(trace), len(tl))):
        tag = trace[i].get("user_metadata") or "before"
        if tag not in index:
            index[tag] = len(out)
            out.append({"step": tag, "peak_allocated_bytes": 0, "peak_reserved_bytes": 0})
        row = out[index[tag]]
        row["peak_allocated_bytes"] = max(row["peak_allocated_bytes"], tl.allocated[i])
        row["peak_reserved_bytes"] = max(row["peak_reserved_bytes"], tl.reserved[i])
    return out


def by_category_at_peak(capture, result) -> dict:
    """Bytes live per category (requested sizes, no rounding) at the replay's peak allocated
    moment, and ``"index"``: which trace entry that was."""
    trace, tl = capture.trace, result.timeline
    n = min(len(trace), len(tl))
    if n == 0:
        return {"index": None, **{c: 0 for c in CATEGORIES}}
    peak_at = max(range(n), key=tl.allocated.__getitem__)
    live, cat_of = {c: 0 for c in CATEGORIES}, {}
    for e in trace[:peak_at + 1]:
        if e["action"] == "alloc":
            cat = e.get("category") or "temporary"
            cat_of[e["addr"]] = (cat, e["size"])
            live[cat] = live.get(cat, 0) + e["size"]
        elif e["action"] == "free_completed" and e["addr"] in cat_of:
            cat, size = cat_of.pop(e["addr"])
            live[cat] -= size
    return {"index": peak_at, **live}


def parameter_bytes(capture) -> int:
    return sum(e["size"] for e in capture.trace
               if e["action"] == "alloc" and e.get("category") == "parameter")


def peak_live(capture, category: str) -> int:
    """The most bytes of one category alive at once over the trace (e.g. the activations held
    when backward begins, which is not the step's overall peak when the optimizer's is higher)."""
    live = peak = 0
    sizes = {}
    for e in capture.trace:
        if e["action"] == "alloc" and e.get("category") == category:
            sizes[e["addr"]] = e["size"]
            live += e["size"]
            peak = max(peak, live)
        elif e["action"] == "free_completed" and e["addr"] in sizes:
            live -= sizes.pop(e["addr"])
    return peak
