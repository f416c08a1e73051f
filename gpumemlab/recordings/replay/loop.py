"""The replay's pass over a recorded trace: each entry made on the allocator model, and what the
pass found (``LoopResult``), built where it is counted.

The seams of the pass, one function each: an ``alloc`` (the hot path, kept inline in
``run_trace``), a burst of recorded releases (``faithful_burst``, ``whatif_burst``), a recorded
``oom`` retried (``retry_oom``), and, in a faithful replay, the recorded cudaMalloc address and
expandable reservation handed to the driver before each malloc (``dictate``). The same order of
operations as c10's ``DeviceCachingAllocator::malloc`` recorded them; see docs/REPLAY.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.allocator import OutOfMemoryError
from gpumemlab.allocator.driver import VA_ALIGN, AddressInUseError

from .releases import FreePages, _leave_pending, _release_recorded, _release_rest, _was_empty_cache
from .result import Timeline

__all__ = ["LoopResult", "run_trace"]

PROGRESS_EVERY = 1 << 16
RELEASES = ("segment_free", "segment_unmap")
MALLOC_GROWS = ("segment_alloc", "oom", "segment_map")


@dataclass
class LoopResult:
    """What one pass over the trace found (``ReplayResult`` takes these fields as they are)."""

    timeline: Timeline = field(default_factory=Timeline)
    oom: dict | None = None        # the first OOM: {index, entry, size, message}
    allocations: int = 0           # alloc entries replayed
    mismatches: int = 0            # allocations not at their recorded address, or that ran out
    segment_mismatches: int = 0    # recorded releases the model could not make, and whole free
    #                                segments it kept through a recorded empty_cache()
    oom_mismatches: int = 0        # recorded OOMs the model did not run into
    unknown_frees: int = 0         # frees of addresses never allocated
    double_allocs: int = 0         # allocations at an address that was still live
    replayed: int = 0              # entries replayed

    @classmethod
    def not_run(cls, oom: dict) -> "LoopResult":
        """No entry replayed: the card was too small for the start state (``oom`` says so)."""
        return cls(oom=oom)


def run_trace(alloc, trace, live, *, n, faithful, translate, router, stop_on_oom=True,
              progress=None, timeline=True, checkpoints=None, resume=None) -> LoopResult:
    """The hot loop: one pass over the first ``n`` trace entries, no per-entry copies. ``live``
    maps recorded addresses to the model's live Blocks (the start state; updated in place). An
    entry with a private ``pool_id`` is malloc'd in that pool (``router``).

    ``timeline=False`` leaves the timeline empty (a search needs only the outcome and peaks);
    ``checkpoints`` (``replay.checkpoints.Checkpoints``) saves the state every so many entries;
    ``resume`` (the ``"loop"`` part of such a state, for this allocator, ``live`` and
    ``router``) goes on from where it was saved."""
    routed = router.malloc
    out = LoopResult()
    tl = out.timeline
    t_alloc, t_res, t_req = tl.allocated.append, tl.reserved.append, tl.requested.append
    stats = alloc.stats
    s_alloc, s_res, s_req = stats.allocated_bytes[0], stats.reserved_bytes[0], stats.requested_bytes[0]
    tl.start = {"allocated_bytes": s_alloc.current, "reserved_bytes": s_res.current,
                "requested_bytes": s_req.current}

    def point():                   # the timeline's figures after an entry
        t_alloc(s_alloc.current)
        t_res(s_res.current)
        t_req(s_req.current)

    if not timeline:
        def point():               # noqa: F811  (no figures kept)
            pass

    malloc, free = alloc.malloc, alloc.free
    next_addresses = alloc.driver.next_addresses
    next_reservations = alloc.driver.next_reservations
    # counted in locals, the loop's hottest state, and stored in ``out`` once at the end
    mismatches = allocations = unknown_frees = double_allocs = 0
    oom = None
    pending_segment = None        # recorded cudaMalloc address for the next malloc
    pending_map = None            # first recorded segment_map since the last malloc
    requested_frees = set()       # free_requested seen, free_completed not yet (other streams)
    served = None                 # a recorded OOM's request these settings served
    i = 0
    if resume is not None:
        (i, pending_segment, pending_map, requested_frees, mismatches, allocations,
         unknown_frees, double_allocs, oom, out.segment_mismatches, out.oom_mismatches) = resume
        requested_frees = set(requested_frees)
    save_at = n if checkpoints is None else checkpoints.next_index(i + 1)
    while i < n:
        if i >= save_at:          # the loop's own state, at the top of entry i
            checkpoints.save(i, alloc, s_res.peak, {
                "alloc": alloc, "live": live, "router": router,
                "loop": (i, pending_segment, pending_map, frozenset(requested_frees), mismatches,
                         allocations, unknown_frees, double_allocs, oom, out.segment_mismatches,
                         out.oom_mismatches)})
            save_at = checkpoints.next_index(i + 1)
        e = trace[i]
        action = e["action"]
        if action == "alloc":
            if faithful:
                dictate(alloc, pending_segment, pending_map, translate)
            addr = e["addr"]
            pool_id = e.get("pool_id")
            m = malloc if pool_id is None or pool_id == (0, 0) else \
                (lambda size, stream, _p=pool_id: routed(_p, size, stream))
            try:
                try:
                    blk = m(e["size"], e["stream"])
                except AddressInUseError:
                    next_addresses.clear()          # the model's own choice took that range
                    blk = m(e["size"], e["stream"])
            except OutOfMemoryError as exc:
                next_addresses.clear()
                next_reservations.clear()
                oom = oom or {"index": i, "entry": e, "size": e["size"], "message": str(exc)}
                if faithful:                        # the recorded allocation succeeded
                    allocations += 1
                    mismatches += 1
                if stop_on_oom:
                    point()
                    i += 1
                    break
                blk = None
            if next_addresses:
                next_addresses.clear()              # recorded a cudaMalloc, the model did not
            if next_reservations:
                next_reservations.clear()           # the model mapped into an existing segment
            pending_segment = pending_map = None
            if blk is not None:
                allocations += 1
                if faithful and blk.ptr != translate(addr):
                    mismatches += 1
                elif not faithful and blk.ptr != addr:
                    mismatches += 1
                if addr in live:
                    double_allocs += 1
                live[addr] = blk
        elif action == "free_completed":
            requested_frees.discard(e["addr"])
            blk = live.pop(e["addr"], None)
            if blk is None:
                unknown_frees += 1
            else:
                free(blk)
        elif action == "free_requested":
            requested_frees.add(e["addr"])
        elif action == "segment_alloc":
            pending_segment = e["addr"]
        elif action == "segment_map":
            if faithful and pending_map is None:
                base = translate(e["addr"])
                if base % VA_ALIGN == 0:
                    pending_map = base
        elif action in RELEASES:
            j = burst_end(trace, i, n)
            after = trace[j + 1]["action"] if j + 1 < n else None
            if faithful:
                out.segment_mismatches += faithful_burst(alloc, trace, i, j, after, translate,
                                                         point)
            else:
                whatif_burst(alloc, j - i, after, point)
            i = j
        elif action == "oom":
            if faithful:
                dictate(alloc, pending_segment, pending_map, translate)
            pending_segment = pending_map = None
            served, ran_out = retry_oom(alloc, routed, e, i)
            if ran_out is None:
                if faithful:
                    out.oom_mismatches += 1         # ... but the recording ran out here
            else:
                oom = oom or ran_out
                if stop_on_oom:
                    point()
                    i += 1
                    break
        point()
        if served is not None:
            free(served)            # the recorded program never had it
            served = None
        i += 1
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress(i, n)
    if progress is not None:
        progress(i, n)
    if i >= len(trace):
        _leave_pending(alloc, live, requested_frees)
    out.oom, out.allocations, out.mismatches = oom, allocations, mismatches
    out.unknown_frees, out.double_allocs, out.replayed = unknown_frees, double_allocs, i
    return out


def burst_end(trace, i, n) -> int:
    """The index of the last release of the burst that starts at entry ``i``."""
    j = i
    while j + 1 < n and trace[j + 1]["action"] in RELEASES:
        j += 1
    return j


def faithful_burst(alloc, trace, i, j, after, translate, point) -> int:
    """Replay the recorded releases ``i..j`` exactly, before the malloc that may follow; return
    how many the model could not make (segment mismatches). If the burst was inside that malloc,
    get_free_block had already failed on a superset of these free blocks, so the malloc goes on
    to the same cudaMalloc. ``point`` adds the timeline's figures after each but the last."""
    mismatches = 0
    released = []
    pages = FreePages(alloc)            # the burst's index of free pages
    for k in range(i, j + 1):
        ek = trace[k]
        blk = _release_recorded(alloc, ek["action"], translate(ek["addr"]), ek["size"], pages)
        if blk is None:
            mismatches += 1
        else:
            released.append(blk)
        if k < j:
            point()
    if after not in MALLOC_GROWS or _was_empty_cache(alloc, trace, j + 1, released):
        # an empty_cache(): it would have released every whole free segment
        mismatches += _release_rest(alloc)
    return mismatches


def whatif_burst(alloc, extra, after, point) -> None:
    """A what-if leaves releases inside a malloc to the model; a burst outside one was an
    ``empty_cache()``. ``extra``: the burst's entries after its first, each a timeline point."""
    if after not in MALLOC_GROWS:
        alloc.empty_cache()
    for _ in range(extra):
        point()


def retry_oom(alloc, routed, e, i):
    """The recording ran out of memory at entry ``i``: try the same (rounded) request.

    -> (the Block served, None) when these settings would have coped: the caller frees it after
    the entry's timeline point, which shows the request served (the recorded program never had
    it); or (None, the OOM's dict) when the model runs out too."""
    driver = alloc.driver
    try:
        return routed(e.get("pool_id"), e["size"], e["stream"]), None
    except OutOfMemoryError as exc:
        return None, {"index": i, "entry": e, "size": e["size"], "message": str(exc)}
    finally:
        driver.next_addresses.clear()
        driver.next_reservations.clear()


def dictate(alloc, pending_segment, pending_map, translate):
    """Before a malloc of a faithful replay: the recorded cudaMalloc address and expandable
    reservation base become the driver's next answers."""
    driver = alloc.driver
    if pending_segment is not None:
        driver.next_addresses[:] = [translate(pending_segment)]
    if pending_map is not None:
        driver.next_reservations.clear()
        driver.reserve_next_va(pending_map)
