"""What two runs of one scenario must share: the model's prediction and a real card's measurement.

A :func:`summary` of a :class:`~gpumemlab.devices.scenarios.ScenarioRecord` keeps only what does
not depend on where the driver put things: each step's outcome and allocated/reserved bytes
(``torch.cuda.memory_allocated``/``memory_reserved`` after it), the first OOM's step, each
segment's pool, size and blocks as (offset within the segment, size, state) (segments sorted,
since the driver picks their addresses), and ``memory_stats()`` at the end. It is plain JSON, so
a child process can send it. :func:`compare` lists the differences, in words.
"""
from __future__ import annotations

from gpumemlab.units import format_size

__all__ = ["summary", "compare", "segment_layout", "oom_step", "UNCOMPARED_STATS"]

# memory_stats() keys left out of the comparison, with the reason: none so far. A key only one
# side reports is never compared (the model reports every key of the PyTorch it follows).
UNCOMPARED_STATS: dict = {}
_LISTED = 3           # differences of one kind shown before "... and N more"


def oom_step(steps):
    """The index of the first step that ran out of memory, or None."""
    return next((s["step"] for s in steps if not s["ok"]), None)


def segment_layout(snapshot) -> list:
    """Each segment as [pool, total size, expandable, [[offset, size, state], ...]], sorted."""
    out = []
    for seg in snapshot.get("segments", []):
        base = seg["address"]
        blocks = [[b["address"] - base, b["size"], b["state"]] for b in seg["blocks"]]
        out.append([seg["segment_type"], seg["total_size"], bool(seg.get("is_expandable")),
                    blocks])
    return sorted(out, key=repr)


def summary(rec, error: str | None = None) -> dict:
    """The comparable part of a scenario record (JSON-able)."""
    stats = {k: int(v) for k, v in rec.stats.items() if isinstance(v, (int, float))
             and not isinstance(v, bool)}
    return {"name": rec.name,
            "steps": [[s["what"], bool(s["ok"]), int(s["allocated"]), int(s["reserved"])]
                      for s in rec.steps],
            "oom_step": oom_step(rec.steps),
            "oom": rec.oom,
            "segments": segment_layout(rec.snapshot) if rec.snapshot else [],
            "stats": stats,
            "notes": {k: v for k, v in rec.notes.items() if isinstance(v, (int, float, str, list))},
            "error": error}


def _steps_line(steps, i):
    return f"step {i} ({steps[i][0]})" if i is not None and i < len(steps) else "no step"


def _more(items):
    extra = len(items) - _LISTED
    return items[:_LISTED] + ([f"... and {extra} more"] if extra > 0 else [])


def compare(predicted: dict, measured: dict) -> list:
    """Differences between two summaries of one scenario, as lines; [] when they agree."""
    diffs = []
    p_steps, m_steps = predicted["steps"], measured["steps"]
    if measured.get("error"):
        diffs.append(f"the GPU run failed after {len(m_steps)} of {len(p_steps)} steps: "
                     f"{measured['error']}")
    p_oom, m_oom = predicted["oom_step"], measured["oom_step"]
    if p_oom != m_oom:
        diffs.append(f"first OOM: the model predicts {_steps_line(p_steps, p_oom)}, the GPU had "
                     f"{_steps_line(m_steps, m_oom) if m_oom is not None else 'none'}")
    if len(p_steps) != len(m_steps) and not measured.get("error"):
        diffs.append(f"steps: the model ran {len(p_steps)}, the GPU {len(m_steps)}")
    step_diffs = []
    for i, (p, m) in enumerate(zip(p_steps, m_steps)):
        for col, label in ((1, "ok"), (2, "allocated"), (3, "reserved")):
            if p[col] != m[col]:
                show = (lambda v: format_size(v)) if col > 1 else str
                step_diffs.append(f"step {i} ({p[0]}): {label} predicted {show(p[col])}, "
                                  f"measured {show(m[col])}")
    diffs += _more(step_diffs)
    if measured.get("error"):
        return diffs          # a run cut short has no final layout or stats to compare
    p_seg, m_seg = predicted["segments"], measured["segments"]
    if p_seg != m_seg:
        only_p = [s for s in p_seg if s not in m_seg]
        only_m = [s for s in m_seg if s not in p_seg]
        diffs.append(f"segments: {len(p_seg)} predicted, {len(m_seg)} measured; "
                     f"{len(only_p)} predicted ones not measured, e.g. {_seg(only_p)}; "
                     f"{len(only_m)} measured ones not predicted, e.g. {_seg(only_m)}")
    p_st, m_st = predicted["stats"], measured["stats"]
    stat_diffs = [f"{k}: predicted {p_st[k]}, measured {m_st[k]}"
                  for k in sorted(set(p_st) & set(m_st))
                  if k not in UNCOMPARED_STATS and p_st[k] != m_st[k]]
    diffs += _more(stat_diffs)
    return diffs


def _seg(segments):
    if not segments:
        return "none"
    pool, size, expandable, blocks = segments[0]
    kind = " expandable" if expandable else ""
    return (f"{pool}{kind} {format_size(size)} with blocks "
            f"{[(off, format_size(n), state) for off, n, state in blocks[:4]]}"
            f"{' ...' if len(blocks) > 4 else ''}")
