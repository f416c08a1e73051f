"""Rebuild the allocator state at the start of a recording (docs/REPLAY.md, step 1).

A recording made with ``torch.cuda.memory._record_memory_history(enabled="all")`` usually begins
in the middle of a run: segments and live tensors from before recording began are in the final
``segments`` but have no ``segment_alloc``/``alloc`` in the trace. This module works out what
existed at the start and carves it into a fresh ``DeviceCachingAllocator`` using only its public
moves (``malloc``/``free`` and ``driver.reserve_next_address``), so that the replay starts from
the recorded state:

* a final segment whose address never appears in a ``segment_alloc`` existed before; so did
  one freed by a ``segment_free`` before any ``segment_alloc`` at its address (size known);
* a block live at the end that the trace did not allocate was live at the start; so was an
  allocation the trace frees without ever allocating it (its block size is ``round_size`` of
  the freed size, plus any gap too small to have been split off);
* everything else inside such segments merges into maximal free gaps, except that a live
  block may own the head of the gap after it: the trace only records requested sizes, and c10
  ``should_split`` leaves an unsplit remainder of up to ``kSmallSize`` (1 MiB; < 512 B in the
  small pool) in the block. ``malloc`` always returns the start of the free block it picked, so
  when the first trace event inside a gap is an ``alloc`` a little past the gap's start, the
  free block began there and the live piece before it owns the difference
  (``_absorb_unsplit_tails``).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from gpumemlab.allocator import K_SMALL_BUFFER, K_SMALL_SIZE, round_size

from .pools import PoolRouter
from .start_expandable import build_expandable, place_gap, scan_expandable

_SEG_EVENTS = ("segment_alloc", "segment_free")


@dataclass
class Piece:
    """A block of a pre-existing segment at the start of the recording."""
    address: int
    size: int
    live: bool
    requested_size: int = 0
    frames: list = field(default_factory=list)
    pool_id: tuple = (0, 0)   # the private pool of its segment (segment_pool_id)
    pending: bool = False     # freed before recording began, its stream events still pending


@dataclass
class StartSegment:
    address: int
    total_size: int
    stream: int
    small: bool
    pieces: list
    pool_id: tuple = (0, 0)   # segment_pool_id: the private pool that owned it


@dataclass
class StartState:
    segments: list            # StartSegment, address order
    live: dict                # recorded address -> Piece (allocations live at the start)
    notes: list
    expandable: list = field(default_factory=list)   # StartReservation, address order


def scan_start_state(segments, trace, config) -> StartState:
    """Work out the segments and live allocations that existed before ``trace`` began."""
    notes = []
    first_seg_event = {}          # address -> first segment action seen
    seg_alloc_addrs = set()       # addresses the trace cudaMalloc'd at least once
    freed_seg_sizes = {}          # pre-existing segments freed in the trace: address -> (size, stream)
    live = {}                     # allocations made by the trace, live at this point
    pre_live = {}                 # address -> (requested size, stream): live before the trace
    for e in trace:
        action = e["action"]
        if action == "alloc":
            live[e["addr"]] = e["size"]
        elif action == "free_completed":
            addr = e["addr"]
            if live.pop(addr, None) is None and addr not in pre_live:
                pre_live[addr] = (e["size"], e.get("stream", 0))
        elif action in _SEG_EVENTS:
            addr = e["addr"]
            if action == "segment_alloc":
                seg_alloc_addrs.add(addr)
            if addr not in first_seg_event:
                first_seg_event[addr] = action
                if action == "segment_free":
                    freed_seg_sizes[addr] = (e["size"], e.get("stream", 0),
                                             tuple(e.get("pool_id") or (0, 0)))
    touched = {e["addr"] for e in trace if e["action"] in ("alloc", "free_requested",
                                                           "free_completed")}
    start_segments = []
    pieces_by_seg = {}
    for seg in segments:
        # a final segment made by the trace (an address can be freed, then reused)
        if seg["address"] in seg_alloc_addrs or seg.get("is_expandable"):
            continue
        pieces = []
        for b in seg["blocks"]:
            if b["state"] != "inactive" and b["address"] not in live:
                pieces.append(Piece(b["address"], b["size"], True, b["requested_size"],
                                    b.get("frames") or [],
                                    pending=_pending_throughout(b, touched)))
        start = StartSegment(seg["address"], seg["total_size"], seg["stream"],
                             seg["segment_type"] == "small", pieces,
                             tuple(seg.get("segment_pool_id") or (0, 0)))
        start_segments.append(start)
        pieces_by_seg[seg["address"]] = start
    for addr, (size, stream, pool_id) in freed_seg_sizes.items():
        if addr not in pieces_by_seg or pieces_by_seg[addr].total_size != size:
            start = StartSegment(addr, size, stream, size <= K_SMALL_BUFFER, [], pool_id)
            start_segments.append(start)
            pieces_by_seg[addr] = start
    start_segments.sort(key=lambda s: s.address)
    expandable = scan_expandable(segments, trace, live, pre_live, notes)
    # allocations the trace frees but never made: place them in their segment
    starts = [s.address for s in start_segments]
    for addr, (requested, _stream) in sorted(pre_live.items()):
        i = bisect_right(starts, addr) - 1
        if i < 0 or addr >= start_segments[i].address + start_segments[i].total_size:
            notes.append(f"free of {addr:#x}, which was never allocated and lies in no known segment")
            continue
        start_segments[i].pieces.append(Piece(addr, round_size(max(requested, 1), config), True,
                                              requested))
    for seg in start_segments:
        seg.pieces = _fill_gaps(seg, notes)
    _absorb_unsplit_tails(start_segments, trace)
    result_live = {}
    for seg in start_segments:
        for p in seg.pieces:
            p.pool_id = seg.pool_id
            if p.live and not p.pending:
                result_live[p.address] = p
    for r in expandable:
        for p in r.pieces:
            if p.live and not p.pending:
                result_live[p.address] = p
    return StartState(start_segments, result_live, notes, expandable)


def _fill_gaps(seg, notes):
    """Sort the live pieces, absorb gaps too small to have been split off, add free gaps."""
    live = sorted(seg.pieces, key=lambda p: p.address)
    out, cursor, end = [], seg.address, seg.address + seg.total_size
    # c10 should_split: large blocks keep a remainder of <= kSmallSize; small ones < 512 B
    min_gap = 512 if seg.small else K_SMALL_SIZE + 1
    for p in live:
        if p.address < cursor:
            notes.append(f"overlapping live blocks at {p.address:#x}: the recording is inconsistent")
            continue
        if p.address > cursor:
            place_gap(out, cursor, p.address - cursor, min_gap, Piece)
        out.append(p)
        cursor = p.address + p.size
    if cursor > end:
        notes.append(f"segment {seg.address:#x}: blocks run past its end")
        out[-1].size -= cursor - end
    elif cursor < end:
        place_gap(out, cursor, end - cursor, min_gap, Piece)
    return out


def _absorb_unsplit_tails(start_segments, trace):
    """Grow a live piece over the head of the free gap after it when the trace shows the free
    block began later: the gap's first event is an ``alloc`` at A, 0 < A - gap start <= 1 MiB
    (large pool; < 512 B small), i.e. a remainder ``should_split`` would not have split off.
    Events after the segment's first ``segment_free`` are a later segment and not looked at."""
    gaps = []                     # (start, end, segment, index of the free piece)
    for seg in start_segments:
        for k, p in enumerate(seg.pieces):
            if not p.live:
                gaps.append((p.address, p.address + p.size, seg, k))
    if not gaps:
        return
    gaps.sort(key=lambda g: g[0])
    starts = [g[0] for g in gaps]
    seg_at = {seg.address: seg for seg in start_segments}
    ended = set()                 # addresses of start segments the trace has freed
    decided = set()               # gaps whose first event has been seen
    for e in trace:
        action = e["action"]
        if action == "segment_free":
            if e["addr"] in seg_at:
                ended.add(e["addr"])
            continue
        if action not in ("alloc", "free_requested", "free_completed"):
            continue
        addr = e["addr"]
        i = bisect_right(starts, addr) - 1
        if i < 0 or i in decided or addr >= gaps[i][1]:
            continue
        start, _end, seg, k = gaps[i]
        decided.add(i)
        if seg.address in ended or action != "alloc" or k == 0 or not seg.pieces[k - 1].live:
            continue
        head = addr - start
        if 0 < head and (head < 512 if seg.small else head <= K_SMALL_SIZE):
            seg.pieces[k - 1].size += head
            seg.pieces[k].address += head
            seg.pieces[k].size -= head
        if len(decided) == len(gaps):
            break


def start_reserved_bytes(state: StartState) -> int:
    """Bytes reserved when the recording began: its segments and mapped expandable pages."""
    return (sum(s.total_size for s in state.segments)
            + sum(p.size for r in state.expandable for p in r.pieces if not p.unmapped))


def build_start_state(alloc, state: StartState, translate, router=None) -> tuple:
    """Carve ``state`` into the empty allocator ``alloc``; return (recorded addr -> Block, problems).

    Every segment is made by one dictated cudaMalloc, then split piece by piece in address order
    while no other free block exists (so best fit has one choice); pieces that were free at the
    start are freed last. ``translate`` maps a recorded address to the simulated address space;
    ``router`` (replay.pools.PoolRouter) puts a private pool's segment back into that pool.
    Pre-existing expandable segments are rebuilt in the default pools.
    """
    router = router if router is not None else PoolRouter(alloc)
    problems = []
    held = []                     # (Piece, Block) in build order
    for seg in state.segments:
        block = _make_segment(alloc, seg, translate(seg.address), router)
        if block is None:
            problems.append(f"segment {seg.address:#x} ({seg.total_size} bytes) could not be rebuilt")
            continue
        alloc.free(block)         # one whole free segment, the only free block there is
        pieces = seg.pieces
        for k, p in enumerate(pieces):
            for request, expect_addr, expect_size in _requests(p, seg, k == len(pieces) - 1,
                                                               alloc.config):
                try:
                    blk = router.malloc(seg.pool_id, request, seg.stream,
                                        (p.frames or None) if p.live else None)
                except Exception as exc:  # the model refused: report, keep going
                    problems.append(f"block {p.address:#x}: {exc}")
                    continue
                if blk.ptr != translate(expect_addr) or blk.size != expect_size:
                    problems.append(f"block {expect_addr:#x} ({expect_size} bytes) rebuilt as "
                                    f"{blk.ptr:#x} ({blk.size} bytes)")
                held.append((p, blk))
    held.extend(build_expandable(alloc, state.expandable, translate, problems))
    live_blocks = {}
    for p, blk in held:
        if p.live and p.pending:
            # freed before recording began, still waiting for another stream at its end: free
            # it behind a recorded use on another stream, so it is pending as it was
            alloc.record_stream(blk, blk.stream + 1)
            alloc.free(blk)
        elif p.live:
            live_blocks[p.address] = blk
        else:
            alloc.free(blk)
    return live_blocks, problems


def _pending_throughout(block, touched) -> bool:
    """Pending free at the end, and the trace never frees nor allocates it: it was pending at
    the start too (the simulator completes events at the next malloc; a real run may not)."""
    return block["state"] == "active_pending_free" and block["address"] not in touched


def _requests(p, seg, last, config):
    """The malloc requests that carve piece ``p``: (request, expected address, expected size).

    A live piece is one request (its recorded size when that rounds to the block). A free
    piece in a small segment is carved in chunks of at most 1 MiB, since a bigger request would
    go to the large pool; in a large segment it is one request.
    """
    if p.live:
        ok = (p.requested_size and not last and round_size(p.requested_size, config) == p.size)
        return [(p.requested_size if ok else p.size, p.address, p.size)]
    if not seg.small:
        return [(p.size, p.address, p.size)]
    out, addr, left = [], p.address, p.size
    while left:
        chunk = min(left, K_SMALL_SIZE)
        out.append((chunk, addr, chunk))
        addr += chunk
        left -= chunk
    return out


def _make_segment(alloc, seg, address, router):
    """One malloc whose cudaMalloc is exactly this segment (address dictated)."""
    if seg.small:
        candidates = [K_SMALL_SIZE]                     # any small request gets a 2 MiB segment
    else:
        candidates = [seg.total_size, seg.total_size - 2 * 1024 * 1024 + 512, K_SMALL_SIZE + 1]
    driver = alloc.driver
    for request in candidates:
        if request <= 0 or (not seg.small and request <= K_SMALL_SIZE):
            continue
        before = set(driver.segments)
        driver.next_addresses[:] = [address]
        try:
            block = router.malloc(seg.pool_id, request, seg.stream)
        except Exception:
            driver.next_addresses.clear()
            return None
        driver.next_addresses.clear()
        new = set(driver.segments) - before
        if new == {address} and driver.segments[address] == seg.total_size:
            return block
        alloc.free(block)
        alloc.empty_cache()
    return None
