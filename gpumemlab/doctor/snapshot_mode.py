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

from gpumemlab.allocator import AllocatorConfig, round_size
from gpumemlab.recordings.replay import replay
from gpumemlab.recordings.replay_setup import recorded_alloc_conf, replay_devices
from gpumemlab.recordings.source import read_snapshot
from gpumemlab.units import format_size, parse_size

from .diagnosis import Diagnosis, Fix
from .evidence import allocation_frames, evidence_lines, state_evidence
from .search import FRACTION, search_settings, smallest_card
from .state_only import diagnose_state

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
                      search: bool = True) -> Diagnosis:
    """The doctor's snapshot mode (``gml.doctor(path_or_dict)``)."""
    snap = read_snapshot(source)
    name = snap.name or "snapshot"
    card = None if total_memory is None else parse_size(total_memory, name="total_memory")
    devices = replay_devices(snap.snapshot)
    if device is None and not devices:
        return diagnose_state(snap, name, card, request, device)
    device = devices[0] if device is None else int(device)
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
    else:
        faithful = replay(snap, device=device, total_memory=card)   # None: unlimited
        share = card
    whatif = None
    if card is not None or recorded is not None:                    # the same card, as a what-if
        whatif = replay(snap, alloc_conf=conf, total_memory=share, device=device)
    oom, at = faithful.oom, faithful
    if recorded is not None and (oom is None or oom["index"] != recorded):
        # the model did not run out where the recording did: read the state there anyway
        at = replay(snap, device=device, stop_at=recorded)
        oom = {"index": recorded, "entry": trace[recorded], "size": trace[recorded]["size"]}
    if oom is None:
        return _fits(snap, name, faithful, conf, device, card, notes, search)
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
    d.evidence = _replay_lines(faithful, whatif, recorded, idx) + evidence_lines(ev)
    d.details = {"oom_entry": idx, "recorded_oom": recorded is not None, "alloc_conf": conf,
                 "oom_during": oom.get("during"), "shortfall_bytes": oom.get("shortfall_bytes"),
                 "allocator_share_bytes": share, "state": ev,
                 "faithful": _result_dict(faithful), "whatif": _result_dict(whatif)}
    d.summary = _summary(d, ev, share)
    if search:
        _search(d, snap, conf, share, device, size, config)
    if card is None:
        d.cannot_tell.append("memory held outside PyTorch's allocator: a snapshot does not record "
                             "the card's size, so the card is taken as what the allocator could "
                             "use (reserved + the driver's free memory at the OOM); pass "
                             "--total-memory for the real card")
    d.views = {"segments": segs, "timeline": at.timeline, "oom_index": idx,
               "capacity": share, "shift": at.address_shift}
    return d


def _summary(d, ev, share):
    req = format_size(d.requested_bytes)
    if d.details.get("oom_during") == "start state":
        return (f"Before its first entry the recording already held {req} (what was reserved or "
                f"live when recording began), more than the {format_size(share)} the allocator "
                f"can use on this card: at least {format_size(d.details['shortfall_bytes'] or 0)} "
                f"short. The run cannot start on it.")
    big = ev["largest_free_block"]
    big_txt = "no free block" if big is None else f"its largest free block is {format_size(big['size'])}"
    if d.kind == "fragmentation":
        return (f"Entry {d.details['oom_entry']} asked for {req} while {format_size(d.allocated_bytes)} "
                f"was allocated of the {format_size(share)} the allocator could use: it would fit if "
                f"the free memory were one piece, but {format_size(d.reserved_unallocated_bytes)} "
                f"is cached in pieces and {big_txt}. Fragmentation.")
    if d.kind == "outside_pytorch":
        return (f"Entry {d.details['oom_entry']} asked for {req}; it would fit on the card but "
                f"{format_size(d.non_pytorch_bytes)} is held outside PyTorch's allocator.")
    return (f"Entry {d.details['oom_entry']} asked for {req} with {format_size(d.allocated_bytes)} "
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


def _result_dict(r):
    if r is None:
        return None
    return {"alloc_conf": r.alloc_conf, "total_memory_bytes": r.total_memory,
            "peak_reserved_bytes": r.peak_reserved, "peak_allocated_bytes": r.peak_allocated,
            "oom_entry": None if r.oom is None else r.oom["index"],
            "address_mismatches": r.address_mismatches, "start_problems": r.start_problems,
            "entries": r.entries, "replayed": r.replayed}


def _search(d, snap, conf, share, device, size, config):
    expandable_on = bool(config.expandable_segments)
    trace = snap.snapshot["device_traces"][device]
    max_request = max([e["size"] for e in trace if e["action"] in ("alloc", "oom")] + [size])
    cands = search_settings(snap, conf, share, device, max_request, expandable_on)
    fixes = []
    for c in cands:
        if c.error:
            continue
        how = f"export PYTORCH_CUDA_ALLOC_CONF={_env(conf, c.alloc_conf)}"
        code = ""
        if "per_process_memory_fraction" in c.alloc_conf:
            code = (f"torch.cuda.set_per_process_memory_fraction({FRACTION})  "
                    f"# PyTorch before the per_process_memory_fraction key")
        fixes.append(Fix(c.name, _why(c.name), how=how, code=code, alloc_conf=c.alloc_conf,
                         fits=c.fits, peak_reserved_bytes=c.peak_reserved_bytes,
                         headroom_bytes=c.headroom_bytes, first_failing_entry=c.first_failing_entry,
                         verified=True, total_memory_bytes=share))
    fixes.sort(key=lambda f: (not f.fits, _changes(f), f.peak_reserved_bytes or 0))
    card = smallest_card(snap, conf, device)
    outside = d.non_pytorch_bytes or 0
    if card["bytes"] is not None:
        fixes.append(Fix("bigger_card", f"under the recorded settings the run fits a card whose "
                         f"allocator share is {format_size(card['bytes'])} (found by binary search, "
                         f"{card['replays']} replays)" + (f", plus {format_size(outside)} held "
                                                         f"outside PyTorch" if outside else ""),
                         how=f"a GPU with at least {format_size(card['bytes'] + outside)}",
                         fits=True, peak_reserved_bytes=card["peak_reserved_bytes"],
                         headroom_bytes=card["bytes"] - card["peak_reserved_bytes"],
                         verified=True, total_memory_bytes=card["bytes"] + outside))
        if not any(f.fits for f in fixes if f.alloc_conf):
            fixes.append(Fix("reduce_peak_memory", f"no setting fits: the run needs "
                             f"{format_size(max(card['bytes'] - share, 0))} more than this card "
                             f"gives the allocator", how="smaller batch or sequence length; "
                             "activation checkpointing; bf16/fp16; fewer optimizer states"))
    d.details["smallest_card"] = card
    d.fixes = fixes


def _changes(fix):
    return fix.alloc_conf.count(",") + 1 - ("per_process_memory_fraction" in fix.alloc_conf)


def _env(recorded, extra):
    return ",".join(p for p in (recorded, extra) if p)


_WHY = {
    "expandable_segments": "one segment per stream that grows and shrinks by pages: freed pages "
                           "are unmapped and remapped where the next request needs them",
    "max_split_size_mb": "cached blocks at least this big are never split for smaller requests, "
                         "so big free blocks stay whole for big requests",
    "garbage_collection_threshold": "above this share of the memory fraction, cached blocks that "
                                    "were not reused are released before a new cudaMalloc",
    "roundup_power2_divisions": "requests round up to a few sizes per power of two, so freed "
                                "blocks fit later requests of similar size",
}


def _why(name):
    parts = [_WHY.get(p.strip().split(":")[0], "") for p in name.split("+")]
    return "; ".join(p for p in parts if p)


def _fits(snap, name, faithful, conf, device, card, notes, search):
    d = Diagnosis(mode="snapshot", source=name, kind="no_oom", summary="", device=device,
                  reserved_bytes=faithful.peak_reserved, allocated_bytes=faithful.peak_allocated,
                  total_bytes=card, notes=notes, assumptions=list(ASSUMPTIONS))
    head = (f"; headroom {format_size(card - faithful.peak_reserved)} on the "
            f"{format_size(card)} card") if card is not None else ""
    d.summary = (f"No OOM: the recording replays to its end with a peak of "
                 f"{format_size(faithful.peak_reserved)} reserved and "
                 f"{format_size(faithful.peak_allocated)} allocated{head}.")
    d.evidence = [f"{faithful.replayed} of {faithful.entries} entries replayed under "
                  f"{conf or 'default settings'}; {faithful.alloc_mismatches} address mismatches"]
    d.details = {"faithful": _result_dict(faithful), "alloc_conf": conf}
    if search:
        smallest = smallest_card(snap, conf, device)
        d.details["smallest_card"] = smallest
        if smallest["bytes"] is not None:
            d.evidence.append(f"the smallest allocator share it fits: {format_size(smallest['bytes'])} "
                              f"({smallest['replays']} replays)")
    if card is None:
        d.cannot_tell.append("the headroom: a recording without an OOM does not say the card's "
                             "size; pass --total-memory")
    d.views = {"segments": faithful.snapshot["segments"], "timeline": faithful.timeline,
               "oom_index": None, "capacity": card, "shift": faithful.address_shift}
    return d
