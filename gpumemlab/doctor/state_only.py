"""Diagnose a snapshot without a trace (``enabled="state"``, or ``memory_snapshot()``'s bare
segment list): the state alone, against a request size.

Nothing can be replayed, so nothing is searched: the question is whether ``request`` fits a cached
free block now (c10 best fit in its pool and stream), and if not, whether it would fit as one
piece (allocated + request against the card, when ``total_memory`` is given). A snapshot of
several devices is diagnosed device by device (``details["devices"]``); the one reported is the
one asked for, else the first whose state cannot serve the request, else the first.
"""
from __future__ import annotations

from gpumemlab.allocator import AllocatorConfig, round_size
from gpumemlab.recordings.replay.prepare import recorded_alloc_conf
from gpumemlab.units import format_size, parse_size
from gpumemlab.viz.metrics import find_fit
from gpumemlab.viz.size_rules import Rules

from .diagnosis import Diagnosis
from .evidence import evidence_lines, state_evidence
from .snapshot_details import new_details

__all__ = ["diagnose_state", "state_of_device"]


def diagnose_state(snap, name, card, request, device, rows=None) -> Diagnosis:
    """The state-only diagnosis of ``device`` (None: every device, one reported)."""
    present = sorted({s["device"] for s in snap.snapshot["segments"]}) or [0]
    wanted = present if device is None else [int(device)]
    each = [_one(snap, name, card, request, d) for d in wanted]
    chosen = next((d for d in each if d.kind not in ("no_oom", "unknown")), each[0]) \
        if request is not None else each[0]
    by_device = {r["device"]: r for r in rows or []}
    out = []
    for d in each:
        row = dict(by_device[d.device]) if d.device in by_device else {
            "device": d.device, "has_trace": False, "trace_entries": 0,
            "recorded_oom_entry": None, "replayed_oom_entry": None}
        row.update(reserved_bytes=d.reserved_bytes, allocated_bytes=d.allocated_bytes,
                   chosen=d is chosen, why="" if d is not chosen else
                   ("asked for (--device)" if device is not None else
                    "no device has a trace: the first whose state cannot serve the request"
                    if chosen.kind not in ("no_oom", "unknown") else
                    "no device has a trace: the first"),
                   state_kind=d.kind, state_summary=d.summary)
        out.append(row)
    chosen.details["devices"] = out
    if len(each) > 1:
        chosen.evidence.insert(0, "devices, state only: " + "; ".join(
            f"GPU {r['device']}: {r['state_kind']}" + (" <- reported" if r["chosen"] else "")
            for r in out))
    return chosen


def state_of_device(snap, name, card, request, row) -> None:
    """Fill ``row`` (a ``devices.device_rows`` row of a device without a trace) with its
    state-only kind and summary."""
    d = _one(snap, name, card, request, row["device"])
    row.update(state_kind=d.kind, state_summary=d.summary)


def _one(snap, name, card, request, device) -> Diagnosis:
    segments = [s for s in snap.snapshot["segments"] if s["device"] == device]
    allocated = sum(s["allocated_size"] for s in segments)
    reserved = sum(s["total_size"] for s in segments)
    frames = {b["address"]: b.get("frames") or [] for s in segments for b in s["blocks"]}
    d = Diagnosis(mode="snapshot", source=name, kind="unknown", summary="", total_bytes=card,
                  allocated_bytes=allocated, reserved_bytes=reserved,
                  reserved_unallocated_bytes=reserved - allocated,
                  free_bytes=None if card is None else card - reserved,
                  device=device, notes=list(snap.notes))
    d.cannot_tell.append("anything about the run's history: this snapshot has no trace "
                         "(record with torch.cuda.memory._record_memory_history()), so nothing "
                         "can be replayed or searched")
    if request is None:
        ev = state_evidence(segments, 0, 0, frames)
        big = max((b["size"] for s in segments for b in s["blocks"] if b["state"] == "inactive"),
                  default=0)
        d.summary = (f"State only: {format_size(reserved)} reserved, {format_size(allocated)} "
                     f"allocated; the largest cached free block is {format_size(big)}. Pass "
                     f"--request SIZE to ask whether a request would fit.")
        d.evidence = evidence_lines(ev)[1:]
        d.details = new_details(state=ev)
        return d
    size = parse_size(request, name="request")
    rules = Rules.from_settings(snap.snapshot.get("allocator_settings"))
    config = AllocatorConfig.parse(recorded_alloc_conf(snap.snapshot))
    rounded = round_size(max(size, 1), config)
    fit = find_fit(segments, size, rules)
    releasable = sum(s["total_size"] for s in segments if not s.get("is_expandable")
                     and len(s["blocks"]) == 1 and s["blocks"][0]["state"] == "inactive")
    ev = state_evidence(segments, rounded, 0, frames)
    d.requested_bytes = rounded
    d.evidence = evidence_lines(ev)
    d.details = new_details(state=ev, fit=fit)
    if fit is not None:
        d.kind = "no_oom"
        d.summary = (f"A {format_size(size)} request fits now: best fit is a cached block of "
                     f"{format_size(fit['block_bytes'])}.")
    elif card is None:
        d.summary = (f"A {format_size(size)} request fits no cached free block; whether a new "
                     f"segment would fit needs the card's size (--total-memory).")
    elif reserved - releasable + rounded <= card:
        d.kind = "no_oom"
        d.summary = (f"No cached block holds {format_size(size)}, but the card has "
                     f"{format_size(card - reserved + releasable)} unreserved once wholly free "
                     f"segments are released (c10 does that before an OOM): a new segment fits.")
    else:
        d.kind = "fragmentation" if allocated + rounded <= card else "exhaustion"
        d.summary = (f"A {format_size(size)} request fits no cached block and the card has only "
                     f"{format_size(card - reserved + releasable)} unreserved even after releasing "
                     f"wholly free segments: "
                     + ("it would fit if the free memory were one piece (fragmentation)."
                        if d.kind == "fragmentation" else
                        "it would not fit even as one piece (exhaustion)."))
    return d
