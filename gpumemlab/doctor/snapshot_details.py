"""The structured part of a snapshot diagnosis (``Diagnosis.details``): the same keys for every
outcome (null where they do not apply, docs/DOCTOR.md lists them), and the start state of a
recording that began mid-run on a card smaller than it held (``recordings.replay.trim``).
"""
from __future__ import annotations

from gpumemlab.units import format_size

from .devices import devices_line
from .diagnosis import Diagnosis

__all__ = ["DETAILS_KEYS", "new_details", "result_dict", "start_dict", "start_lines",
           "start_note", "start_state_diagnosis"]

DETAILS_KEYS = ("oom_entry", "recorded_oom", "alloc_conf", "oom_during", "shortfall_bytes",
                "allocator_share_bytes", "state", "fit", "devices", "start_state", "faithful",
                "whatif", "smallest_card", "search", "host")


def new_details(**given) -> dict:
    """Every key of ``DETAILS_KEYS``, None unless given."""
    unknown = set(given) - set(DETAILS_KEYS)
    if unknown:
        raise KeyError(f"not a details key: {sorted(unknown)}")
    out = dict.fromkeys(DETAILS_KEYS)
    out.update(given)
    return out


def result_dict(r):
    """A replay's figures (a ``ReplayResult``), or None."""
    if r is None:
        return None
    return {"alloc_conf": r.alloc_conf, "total_memory_bytes": r.total_memory,
            "peak_reserved_bytes": r.peak_reserved, "peak_allocated_bytes": r.peak_allocated,
            "oom_entry": None if r.oom is None else r.oom["index"],
            "address_mismatches": r.address_mismatches, "start_problems": r.start_problems,
            "entries": r.entries, "replayed": r.replayed}


def start_dict(r):
    """The start-state trim of a faithful replay (``ReplayResult.start_trim``), or None when the
    card held the recorded start state as it was."""
    t = getattr(r, "start_trim", None)
    if not t:
        return None
    return {"live_bytes": t["live_bytes"], "cached_bytes": t["cached_bytes"],
            "recorded_reserved_bytes": t["recorded_reserved_bytes"],
            "card_free_bytes": t["card_free_bytes"], "released_bytes": t["released_bytes"],
            "reserved_after_bytes": t["reserved_after_bytes"], "outcome": t["outcome"]}


def start_lines(r) -> list:
    t = start_dict(r)
    if t is None:
        return []
    line = (f"start state: the recording began with {format_size(t['recorded_reserved_bytes'])} "
            f"reserved: {format_size(t['live_bytes'])} live, {format_size(t['cached_bytes'])} "
            f"cached; the card has {format_size(t['card_free_bytes'])} for it")
    if t["outcome"] == "cache released":
        line += (f"; as c10 does before failing (release_cached_blocks), the replay released "
                 f"{format_size(t['released_bytes'])} of whole cached segments and went on "
                 f"with {format_size(t['reserved_after_bytes'])} reserved")
    elif t["outcome"] == "live bytes do not fit":
        line += "; the live bytes alone do not fit"
    else:
        line += ("; after releasing the whole cached segments, the segments that hold live "
                 "blocks still did not fit: the live blocks were placed again by the model "
                 "(a what-if from there on)")
    return [line]


def start_note(t) -> str:
    """The summary's opening for a trimmed start state ("" when there is none)."""
    if not t or t["outcome"] == "live bytes do not fit":
        return ""
    return (f"The recording began with {format_size(t['cached_bytes'])} cached beyond the "
            f"{format_size(t['live_bytes'])} live; on this card c10 releases that cache before "
            f"failing, and so does the replay. ")


def start_state_diagnosis(name, faithful, share, common, assumptions) -> Diagnosis:
    """The live bytes at the start of the recording do not fit the card: exhaustion, before
    the first entry. Nothing was requested: the figures are the live and cached bytes."""
    t = start_dict(faithful)
    oom = faithful.oom
    d = Diagnosis(mode="snapshot", source=name, kind="exhaustion", summary="",
                  total_bytes=common["card"], allocated_bytes=t["live_bytes"],
                  reserved_bytes=t["recorded_reserved_bytes"],
                  reserved_unallocated_bytes=t["cached_bytes"], device=common["device"],
                  notes=common["notes"], assumptions=list(assumptions))
    d.summary = (f"When recording began, {format_size(t['live_bytes'])} was live (allocated), "
                 f"more than the {format_size(share)} the allocator can use on this card, at "
                 f"least {format_size(oom['shortfall_bytes'])} short: the run cannot reach its "
                 f"first entry on it." + (f" (The {format_size(t['cached_bytes'])} it also had "
                                           f"cached would have been released; it does not "
                                           f"decide this.)" if t["cached_bytes"] else ""))
    d.evidence = [devices_line(common["rows"])] + start_lines(faithful)
    d.details = new_details(oom_entry=None, recorded_oom=False, oom_during="start state",
                            shortfall_bytes=oom["shortfall_bytes"], allocator_share_bytes=share,
                            devices=common["rows"], start_state=t,
                            faithful=result_dict(faithful))
    d.fixes = []
    d.views = {"segments": faithful.snapshot["segments"], "timeline": faithful.timeline,
               "oom_index": None, "capacity": share, "shift": faithful.address_shift}
    return d
