"""Which device of a snapshot the doctor diagnoses, and what it saw on the others.

``torch.cuda.memory._snapshot()`` holds one trace per device (``device_traces[d]``) and the
segments of every device (each with its ``device``). The device that ran out is the one whose
trace holds a recorded ``oom`` entry (the first such device); without one, with a card size,
the first device whose faithful replay on that card runs out; else the first device with a
trace. A device that has segments but no trace can only be read as a state (``state_only``).
Every device looked at is listed, in order, with what was found on it.
"""
from __future__ import annotations

from gpumemlab.recordings.replay import replay
from gpumemlab.recordings.replay.prepare import replay_devices

__all__ = ["choose_device", "device_rows", "devices_line"]


def device_rows(snapshot: dict) -> list:
    """One row per device that has a trace or segments: its figures before any replay."""
    traces = snapshot.get("device_traces") or []
    traced = set(replay_devices(snapshot))
    with_segments = {s["device"] for s in snapshot["segments"]}
    rows = []
    for d in sorted(traced | with_segments):
        trace = traces[d] if d < len(traces) else []
        segs = [s for s in snapshot["segments"] if s["device"] == d]
        rows.append({"device": d, "has_trace": d in traced,
                     "trace_entries": len(trace) if d in traced else 0,
                     "recorded_oom_entry": next((k for k, e in enumerate(trace)
                                                 if e["action"] == "oom"), None)
                     if d in traced else None,
                     "replayed_oom_entry": None,
                     "reserved_bytes": sum(s["total_size"] for s in segs),
                     "allocated_bytes": sum(s["allocated_size"] for s in segs),
                     "chosen": False, "why": "", "state_kind": None, "state_summary": None})
    return rows


def choose_device(snap, card, device):
    """``(device or None, rows, replay result or None)``: the device to diagnose (None: no
    device has a trace), the rows of ``device_rows`` with ``chosen``/``why`` filled in, and the
    faithful replay on ``card`` of the chosen device when choosing it took one."""
    rows = device_rows(snap.snapshot)
    traced = [r for r in rows if r["has_trace"]]
    found, why, result = None, "", None
    if device is not None:
        found, why = int(device), "asked for (--device)"
    elif not traced:
        found = None
    elif any(r["recorded_oom_entry"] is not None for r in traced):
        row = next(r for r in traced if r["recorded_oom_entry"] is not None)
        found, why = row["device"], "its trace holds the recorded OOM"
    elif card is not None:
        for r in traced:
            res = replay(snap, device=r["device"], total_memory=card)
            r["replayed_oom_entry"] = None if res.oom is None else res.oom["index"]
            if res.oom is not None:
                found, why, result = r["device"], "the first to run out on the given card", res
                break
        if found is None:
            found, why = traced[0]["device"], "no device runs out on the given card: the first"
    else:
        found, why = traced[0]["device"], "no recorded OOM: the first device with a trace"
    for r in rows:
        if r["device"] == found:
            r["chosen"], r["why"] = True, why
    return found, rows, result


def devices_line(rows) -> str:
    """The devices looked at, in one evidence line."""
    parts = []
    for r in rows:
        if not r["has_trace"]:
            what = "no trace (state only)"
        elif r["recorded_oom_entry"] is not None:
            what = f"recorded OOM at entry {r['recorded_oom_entry']}"
        elif r["replayed_oom_entry"] is not None:
            what = f"runs out at entry {r['replayed_oom_entry']} on the card"
        else:
            what = f"{r['trace_entries']} entries, no recorded OOM"
        parts.append(f"GPU {r['device']}: {what}" + (f" <- diagnosed ({r['why']})"
                                                      if r["chosen"] else ""))
    return f"devices looked at ({len(rows)}): " + "; ".join(parts)
