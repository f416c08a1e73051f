"""Diagnose a snapshot: replay it faithfully, find the OOM, classify it from the full allocator state,
gather the evidence, search the settings on the replay and recommend the smallest change that a
replay shows fits.

The OOM is the recording's first ``oom`` entry, or, with ``total_memory``, the first allocation
that fails when the trace is replayed on a card of that size. Capacities: a recorded OOM tells
what the allocator could have had (reserved then + the driver's free memory, the replay's
default); ``total_memory`` is the whole card, so card - that = memory held outside PyTorch's
allocator. Classification (see ``diagnosis``): fragmentation when allocated + request fits the
allocator's share; outside_pytorch when it fits the card but not the share; else exhaustion.
"""
from __future__ import annotations

import time

from gpumemlab.allocator import AllocatorConfig, round_size
from gpumemlab.recordings.replay import replay
from gpumemlab.recordings.replay.prepare import recorded_alloc_conf, replay_devices
from gpumemlab.recordings.source import read_snapshot
from gpumemlab.units import format_size, parse_size
from gpumemlab.viz.host_view import host_facts, host_line

from .devices import choose_device, devices_line
from .diagnosis import Diagnosis
from .evidence import allocation_frames, evidence_lines, state_evidence
from .fixes import add_fixes, reconcile
from .search import DEFAULT_BUDGET_S, smallest_card
from .snapshot_details import (new_details, result_dict, start_dict, start_lines, start_note,
                               start_state_diagnosis)
from .state_only import diagnose_state, state_of_device

__all__ = ["diagnose_snapshot", "ASSUMPTIONS"]

ASSUMPTIONS = [
    "the run makes the same allocations in the same order under another setting or card: eager "
    "PyTorch does (the allocator does not change what a program asks for); torch.compile "
    "autotuning, cuDNN benchmark mode or code that adapts to free memory may not",
    "a what-if replay starts from the allocations live when recording began, without the cached "
    "free memory of that moment",
    "memory outside PyTorch's allocator stays what it was at the OOM",
]


def diagnose_snapshot(source, *, total_memory=None, request=None, device=None,
                      search: bool = True, workers=None, budget_s=None) -> Diagnosis:
    """The doctor's snapshot mode (``gml.doctor(path_or_dict)``); a snapshot with pinned host
    memory (``host_segments``) also gets its host figures: one evidence line and
    ``details["host"]`` (the device's OOM is not the host's, so they change no verdict)."""
    snap = read_snapshot(source)
    d = _diagnose(snap, total_memory=total_memory, request=request, device=device,
                  search=search, workers=workers, budget_s=budget_s)
    host = host_facts(snap.snapshot)
    if host is not None:
        d.evidence.append(host_line(host))
    if isinstance(d.details, dict):
        d.details["host"] = host
    return d


def _diagnose(snap, *, total_memory, request, device, search, workers, budget_s) -> Diagnosis:
    name = snap.name or "snapshot"
    card = None if total_memory is None else parse_size(total_memory, name="total_memory",
                                                        round_down=True)
    device, rows, first = choose_device(snap, card, device)
    if device is not None and rows and device not in {r["device"] for r in rows}:
        raise ValueError(f"{name}: no device {device} in this snapshot (devices: "
                         f"{', '.join(str(r['device']) for r in rows)})")
    if device is None:
        return diagnose_state(snap, name, card, request, None, rows)
    if not 0 <= device < len(snap.snapshot["device_traces"]) or \
            device not in replay_devices(snap.snapshot):
        return diagnose_state(snap, name, card, request, device, rows)
    for r in rows:
        if not r["has_trace"]:
            state_of_device(snap, name, card, request, r)
    trace = snap.snapshot["device_traces"][device]
    conf = recorded_alloc_conf(snap.snapshot)
    config = AllocatorConfig.parse(conf)
    recorded = next((k for k, e in enumerate(trace) if e["action"] == "oom"), None)
    notes = list(snap.notes)
    if recorded is not None:
        faithful = replay(snap, device=device)                      # capacity from the OOM entry
        share = faithful.total_memory
        if card is not None and card < share:
            notes.append(f"--total-memory {format_size(card)} is less than the recording shows "
                         f"the allocator had ({format_size(share)}): the recording's figure is used")
            card = None
    else:                                                           # None: unlimited
        faithful = first or replay(snap, device=device, total_memory=card)
        share = card
    whatif = None
    if card is not None or recorded is not None:                    # the same card, as a what-if
        whatif = replay(snap, alloc_conf=conf, total_memory=share, device=device)
    oom, at = faithful.oom, faithful
    if recorded is not None and (oom is None or oom["index"] != recorded):
        # the model did not run out where the recording did: read the state there anyway
        at = replay(snap, device=device, stop_at=recorded)
        oom = {"index": recorded, "entry": trace[recorded], "size": trace[recorded]["size"]}
    common = {"rows": rows, "notes": notes, "device": device, "card": card}
    if oom is None:
        return _fits(snap, name, faithful, conf, common, search, budget_s)
    if oom.get("during") == "start state":
        return start_state_diagnosis(name, faithful, card, common, ASSUMPTIONS)
    idx = oom["index"]
    entry = oom["entry"] or {}
    size = oom["size"] if entry.get("action") == "oom" else round_size(max(oom["size"], 1), config)
    state = at.allocator
    allocated = state.stats.allocated_bytes[0].current
    reserved = state.stats.reserved_bytes[0].current
    outside = (card - share) if card is not None else None
    if allocated + size <= share:
        kind = "fragmentation"
    elif outside and allocated + size <= share + outside:
        kind = "outside_pytorch"
    else:
        kind = "exhaustion"
    final = [s for s in snap.snapshot["segments"] if s["device"] == device]
    segs = at.snapshot["segments"]
    ev = state_evidence(segs, size, entry.get("stream", 0),
                        allocation_frames(trace, idx, final), at.address_shift)
    d = Diagnosis(
        mode="snapshot", source=name, kind=kind, summary="", requested_bytes=size,
        total_bytes=card if card is not None else share, free_bytes=share - reserved,
        allocated_bytes=allocated, reserved_bytes=reserved,
        reserved_unallocated_bytes=reserved - allocated, non_pytorch_bytes=outside,
        device=device, notes=notes, assumptions=list(ASSUMPTIONS))
    d.evidence = ([devices_line(rows)] + _replay_lines(faithful, whatif, recorded, idx)
                  + start_lines(faithful) + evidence_lines(ev))
    d.details = new_details(
        oom_entry=idx, recorded_oom=recorded is not None, alloc_conf=conf,
        oom_during=oom.get("during"), shortfall_bytes=oom.get("shortfall_bytes"),
        allocator_share_bytes=share, state=ev, devices=rows, start_state=start_dict(faithful),
        faithful=result_dict(faithful), whatif=result_dict(whatif))
    if search:
        add_fixes(d, snap, conf, share, device, size, config, workers=workers, budget_s=budget_s)
        reconcile(d)
    d.summary = _summary(d, ev, share)
    if card is None:
        d.cannot_tell.append("memory held outside PyTorch's allocator: a snapshot does not record "
                             "the card's size, so the card is taken as what the allocator could "
                             "use (reserved + the driver's free memory at the OOM); pass "
                             "--total-memory for the real card")
    d.views = {"segments": segs, "timeline": at.timeline, "oom_index": idx,
               "capacity": share, "shift": at.address_shift, "recording": snap.snapshot,
               "device": device}
    return d


def _summary(d, ev, share):
    req = format_size(d.requested_bytes)
    big = ev["largest_free_block"]
    big_txt = "no free block" if big is None else f"its largest free block is {format_size(big['size'])}"
    trimmed = start_note(d.details.get("start_state"))
    if d.kind == "fragmentation":
        return trimmed + (f"Entry {d.details['oom_entry']} asked for {req} while {format_size(d.allocated_bytes)} "
                f"was allocated of the {format_size(share)} the allocator could use: it would fit if "
                f"the free memory were one piece, but {format_size(d.reserved_unallocated_bytes)} "
                f"is cached in pieces and {big_txt}. Fragmentation.")
    if d.kind == "outside_pytorch":
        return trimmed + (f"Entry {d.details['oom_entry']} asked for {req}; it would fit on the card but "
                f"{format_size(d.non_pytorch_bytes)} is held outside PyTorch's allocator.")
    return trimmed + (f"Entry {d.details['oom_entry']} asked for {req} with {format_size(d.allocated_bytes)} "
            f"allocated: more than the {format_size(share)} the allocator could use even as one "
            f"piece. The run needs more memory than this card.")


def _replay_lines(faithful, whatif, recorded, idx):
    out = []
    if recorded is not None:
        same = faithful.oom is not None and faithful.oom["index"] == recorded
        out.append(f"recorded OOM at entry {recorded}; the faithful replay "
                   + ("runs out at the same entry" if same else
                      f"runs out at entry {idx}" if faithful.oom else "does not run out"))
    else:
        out.append(f"replayed on {format_size(faithful.total_memory)}: first OOM at entry {idx}")
    out.append(f"addresses: {faithful.alloc_mismatches} of {faithful.allocations} allocations "
               f"not where recorded" + (f"; start state: {faithful.start_problems[0]}"
                                        if faithful.start_problems else ""))
    if whatif is not None:
        w = "no OOM" if whatif.oom is None else f"OOM at entry {whatif.oom['index']}"
        agree = (whatif.oom is None) == (faithful.oom is None) and (
            whatif.oom is None or whatif.oom["index"] == idx)
        out.append(f"what-if under the recorded settings on the same capacity: {w}"
                   + ("" if agree else " (it picks its own addresses and starts without the "
                      "cached free memory, so it can run out later or not at all)"))
    return out


def _fits(snap, name, faithful, conf, common, search, budget_s):
    card, device = common["card"], common["device"]
    d = Diagnosis(mode="snapshot", source=name, kind="no_oom", summary="", device=device,
                  reserved_bytes=faithful.peak_reserved, allocated_bytes=faithful.peak_allocated,
                  total_bytes=card, notes=common["notes"], assumptions=list(ASSUMPTIONS))
    head = (f"; headroom {format_size(card - faithful.peak_reserved)} on the "
            f"{format_size(card)} card") if card is not None else ""
    d.summary = start_note(start_dict(faithful)) + (
        f"No OOM: the recording replays to its end with a peak of "
        f"{format_size(faithful.peak_reserved)} reserved and "
        f"{format_size(faithful.peak_allocated)} allocated{head}.")
    d.evidence = [devices_line(common["rows"]),
                  f"{faithful.replayed} of {faithful.entries} entries replayed under "
                  f"{conf or 'default settings'}; {faithful.alloc_mismatches} address "
                  f"mismatches"] + start_lines(faithful)
    d.details = new_details(alloc_conf=conf, devices=common["rows"], recorded_oom=False,
                            allocator_share_bytes=card,
                            start_state=start_dict(faithful), faithful=result_dict(faithful))
    if search:
        budget = DEFAULT_BUDGET_S if budget_s is None else float(budget_s)
        smallest = smallest_card(snap, conf, device, deadline=time.monotonic() + budget)
        d.details["smallest_card"] = smallest
        if smallest["bytes"] is not None:
            d.evidence.append(f"the smallest allocator share it fits: {format_size(smallest['bytes'])} "
                              f"({smallest['replays']} replays)")
        if smallest["stopped_at_budget"]:
            d.notes.append(f"the smallest-card search stopped at its time budget of {budget:g} s: "
                           f"the card given is the smallest verified so far (--time-budget)")
    if card is None:
        d.cannot_tell.append("the headroom: a recording without an OOM does not say the card's "
                             "size; pass --total-memory")
    d.views = {"segments": faithful.snapshot["segments"], "timeline": faithful.timeline,
               "oom_index": None, "capacity": card, "shift": faithful.address_shift,
               "recording": snap.snapshot, "device": d.device}
    return d
