"""The fixes of a snapshot diagnosis: the settings search and the smallest card (``search``)
turned into ranked ``Fix`` entries, and the rule that the headline and the fixes never disagree.

Ranking: fitting settings first, then the fewest keys changed (a memory fraction does not count
as a key), then the lowest peak reserved; then the bigger card; when no setting fits, how much
less the run must hold. The headline's kind follows the figures at the OOM (``snapshot_mode``);
a setting that a replay shows fits on the same capacity proves the run is not *exhausting* that
capacity (every setting makes the same allocations), so ``reconcile`` turns an ``exhaustion``
headline into ``fragmentation`` and says why.
"""
from __future__ import annotations

import time

from gpumemlab.units import format_size

from .diagnosis import Fix
from .search import DEFAULT_BUDGET_S, FRACTION, search_settings, workers_available

__all__ = ["add_fixes", "reconcile"]

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


def _changes(fix):
    return fix.alloc_conf.count(",") + 1 - ("per_process_memory_fraction" in fix.alloc_conf)


def _env(recorded, extra):
    return ",".join(p for p in (recorded, extra) if p)


def add_fixes(d, snap, conf, share, device, size, config, *, workers=None, budget_s=None):
    """Search the settings and the smallest card on ``snap``; fill ``d.fixes`` and the search's
    own figures (``d.details["search"]``, ``d.details["smallest_card"]``)."""
    budget = DEFAULT_BUDGET_S if budget_s is None else float(budget_s)
    t0 = time.monotonic()
    deadline = t0 + budget
    expandable_on = bool(config.expandable_segments)
    trace = snap.snapshot["device_traces"][device]
    max_request = max([e["size"] for e in trace if e["action"] in ("alloc", "oom")] + [size])
    n_workers = workers_available(workers)
    cands, card = search_settings(snap, conf, share, device, max_request, expandable_on,
                                  workers=n_workers, deadline=deadline, card_conf=conf)
    fixes = []
    for c in cands:
        if c.error or c.skipped:
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
    skipped = sum(c.skipped for c in cands)
    stopped = bool(skipped or card["stopped_at_budget"])
    d.details["smallest_card"] = card
    d.details["search"] = {"workers": n_workers, "budget_s": budget,
                           "elapsed_s": round(time.monotonic() - t0, 3),
                           "stopped_at_budget": stopped, "candidates": len(cands),
                           "replayed": len(cands) - skipped}
    if stopped:
        d.notes.append(f"the search stopped at its time budget of {budget:g} s: "
                       f"{len(cands) - skipped} of {len(cands)} settings replayed"
                       + ("; the smallest card is the smallest verified so far, not "
                          "necessarily the least" if card["stopped_at_budget"] else "")
                       + " (give it more with --time-budget SECONDS)")
    d.fixes = fixes


def reconcile(d) -> None:
    """Never an ``exhaustion`` headline beside a setting that a replay shows fits."""
    fit = next((f for f in d.fixes if f.alloc_conf and f.fits), None)
    if d.kind == "exhaustion" and fit is not None and d.requested_bytes is not None:
        d.kind = "fragmentation"
        d.notes.append(f"classified as fragmentation, not exhaustion: {fit.name} replays to the "
                       f"end on the same capacity, so the run's live memory fits it; what ran "
                       f"out was the memory cached in pieces")
