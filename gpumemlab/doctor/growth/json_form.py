"""The JSON form of a :class:`~gpumemlab.doctor.growth.result.GrowthReport` (``report.json()``,
``report.as_dict()``): versioned, every field documented in docs/GROWTH.md ("JSON schema").
Sizes are bytes; entry numbers index the recording's trace; null where a value does not apply.
"""
from __future__ import annotations

import json

__all__ = ["SCHEMA_VERSION", "as_dict", "to_json"]

SCHEMA_VERSION = 1   # raised when a field is removed or changes meaning


def _site(s) -> dict:
    return {"where": s.where, "count": s.count, "bytes": s.bytes, "sizes": list(s.sizes),
            "category": s.category, "indices": list(s.indices), "freed_at": list(s.freed_at),
            "freed_by": s.freed_by_where,
            "iterations": list(s.iterations)}


def _trigger(t) -> dict:
    return {"index": t.index, "size": t.size, "rounded_size": t.rounded_size,
            "reserved_growth_bytes": t.reserved_growth_bytes, "seen_at": t.seen_at,
            "where": t.where, "category": t.category}


def _iteration(it) -> dict:
    return {"name": it.name, "number": it.number, "start": it.start, "end": it.end,
            "allocated_bytes": it.allocated_bytes, "reserved_bytes": it.reserved_bytes,
            "allocated_growth_bytes": it.allocated_growth_bytes,
            "reserved_growth_bytes": it.reserved_growth_bytes,
            "peak_allocated_bytes": it.peak_allocated_bytes,
            "earlier_peak_allocated_bytes": it.earlier_peak_allocated_bytes,
            "kept_bytes": it.kept_bytes, "gap_bytes": it.gap_bytes, "cause": it.cause,
            "why": it.why, "evidence": it.evidence(), "kept": [_site(s) for s in it.kept],
            "carried": [_site(s) for s in it.carried],
            "triggers": [_trigger(t) for t in it.triggers]}


def as_dict(report) -> dict:
    r = report.result
    found = dict(report.found) if report.found else {}
    return {"schema_version": SCHEMA_VERSION,
            "iterations_found": {k: found.get(k) for k in (
                "method", "iterations", "anchor_index", "anchor_where", "confidence", "level",
                "explanation")},
            "causes": report.causes,
            "iterations": [_iteration(it) for it in report.iterations],
            "replay": None if r is None else {
                "alloc_conf": r.alloc_conf, "total_memory_bytes": r.total_memory,
                "peak_reserved_bytes": r.peak_reserved, "peak_allocated_bytes": r.peak_allocated,
                "oom_entry": None if r.oom is None else r.oom["index"], "entries": r.entries,
                "replayed": r.replayed},
            "notes": list(report.notes)}


def to_json(report, indent=2) -> str:
    return json.dumps(as_dict(report), indent=indent)
