"""Rebuild the expandable segments that existed when a recording began (c10 ``ExpandableSegment``).

A recording made with ``expandable_segments:True`` that starts mid-run has pages already mapped
and no ``segment_map`` for them. The snapshot's final segments list each contiguous mapped range
of an expandable segment as one segment; walking the trace backwards from them (a
``segment_map`` was unmapped before it, a ``segment_unmap`` was mapped) gives the pages mapped
at the start. Each reservation (one per pool and stream) is rebuilt from its base: c10 maps at
the lowest free address, so the base is the lowest page mapped at the start, or a lower page
the trace maps later on the same stream (the base pages had been unmapped before recording
began); a base the recording never shows cannot be found, and addresses then differ. The pieces (live blocks, free mapped gaps, unmapped
holes) are carved with the allocator's own moves: map the whole span with mallocs, free it,
malloc every piece in address order (one free block, so best fit has one choice), unmap the
holes (``unmap_block``) while their neighbours are still held, and leave the free pieces to the
caller to free last.

Small-pool pages are carved 1 MiB a malloc (c10's small-pool limit), so the work of a rebuild
follows the bytes a segment spans, which a few hundred bytes of file can set to terabytes. The
mallocs of all small-pool rebuilds are therefore bounded by the size of what the snapshot
describes (``SMALL_CHUNKS_BASE`` plus ``SMALL_CHUNKS_PER_PIECE`` per piece); a reservation
past that bound is not rebuilt and is reported as a start problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.allocator import K_LARGE_BUFFER, K_SMALL_BUFFER, K_SMALL_SIZE, round_size
from gpumemlab.allocator.driver import VA_ALIGN

__all__ = ["StartReservation", "scan_expandable", "build_expandable"]

_LARGE_PAGE = K_LARGE_BUFFER    # c10 expandable segments map the large pool in 20 MiB pages
_FAR = 1 << 40                   # a reservation spans about the card's memory: never a TiB away
SMALL_CHUNKS_BASE = 16384        # 16 GiB of small-pool pages, carved whatever the snapshot
SMALL_CHUNKS_PER_PIECE = 16      # and 16 MiB more for each block or gap it lists


@dataclass
class ExpPiece:
    address: int
    size: int
    live: bool
    requested_size: int = 0
    frames: list = field(default_factory=list)
    unmapped: bool = False
    pending: bool = False     # see replay.start._pending_throughout


@dataclass
class StartReservation:
    base: int
    small: bool
    stream: int
    pieces: list          # ExpPiece in address order, covering [base, end of the last mapped page)


def place_gap(pieces: list, address: int, size: int, min_gap: int, piece_type) -> None:
    """Add the ``size`` bytes at ``address`` that no live block covers to ``pieces``: a gap under
    ``min_gap`` is a remainder c10's ``should_split`` would not have cut off, so it belongs to
    the live block before it; any other gap is a free block (``piece_type(address, size, False)``).
    """
    if size < min_gap and pieces and pieces[-1].live:
        pieces[-1].size += size
    else:
        pieces.append(piece_type(address, size, False))


def _sub(ranges, a, b):
    out = []
    for s, e in ranges:
        if e <= a or s >= b:
            out.append((s, e))
            continue
        if s < a:
            out.append((s, a))
        if e > b:
            out.append((b, e))
    return out


def _add(ranges, a, b):
    merged = []
    for s, e in sorted(ranges + [(a, b)]):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def scan_expandable(segments, trace, made_by_trace, pre_live, notes) -> list:
    """The expandable reservations mapped at the start. ``made_by_trace``: addresses the trace
    allocated and left live; ``pre_live``: address -> (requested, stream) of allocations the trace
    frees but never makes (entries placed here are removed from it)."""
    final = [s for s in segments if s.get("is_expandable")]
    touched = {e["addr"] for e in trace if e["action"] in ("alloc", "free_requested",
                                                           "free_completed")}
    events = [e for e in trace if e["action"] in ("segment_map", "segment_unmap")]
    if not final and not events:
        return []
    mapped = []
    for s in final:
        mapped = _add(mapped, s["address"], s["address"] + s["total_size"])
    for e in reversed(events):
        a, b = e["addr"], e["addr"] + e["size"]
        mapped = _sub(mapped, a, b) if e["action"] == "segment_map" else _add(mapped, a, b)
    if not mapped:
        return []
    groups = {}
    for a, b in mapped:
        groups.setdefault(_label(a, b, final, events), []).append((a, b))
    out = []
    taken = [r for rs in groups.values() for r in rs]
    for (small, stream), ranges in groups.items():
        base = _base(min(a for a, _ in ranges), small, stream, events, taken)
        out.append(StartReservation(base, small, stream,
                                    _pieces(base, ranges, final, made_by_trace, pre_live, small,
                                            touched)))
    out.sort(key=lambda r: r.base)
    if out:
        notes.append(f"expandable segments mapped before recording began: rebuilt "
                     f"{len(out)} reservation(s) from base {out[0].base:#x}")
    return out


def _base(lo, small, stream, events, taken):
    """The reservation's base: its lowest page mapped at the start, or lower when the trace
    later maps a page below it on the same stream, a whole number of the pool's pages away,
    outside every other reservation's start pages (c10 maps at the lowest free address, so the
    base pages had been unmapped before recording began)."""
    page = K_SMALL_BUFFER if small else _LARGE_PAGE
    base = lo
    for e in events:
        a = e["addr"]
        if (e["action"] == "segment_map" and e.get("stream", 0) == stream and a < base
                and (lo - a) % page == 0 and lo - a < _FAR
                and (e["size"] % _LARGE_PAGE != 0) == small
                and not any(s <= a < t for s, t in taken)):
            base = a
    return base // VA_ALIGN * VA_ALIGN


def _label(a, b, final, events):
    """(small pool?, stream) of a range mapped at the start: from the first trace event on it
    when that unmaps it (its stream; 2 MiB small pages, so a size that is no multiple of the
    20 MiB large page is small, a multiple is taken as large), else from the final segment over
    it (the range stayed mapped; the address may since have been reused by another reservation
    only after an unmap, which the first rule sees)."""
    for e in events:
        if e["addr"] < b and a < e["addr"] + e["size"]:
            if e["action"] == "segment_unmap":
                return e["size"] % _LARGE_PAGE != 0, e.get("stream", 0)
            break
    for s in final:
        if s["address"] < b and a < s["address"] + s["total_size"]:
            return s["segment_type"] == "small", s.get("stream", 0)
    return (b - a) % _LARGE_PAGE != 0, 0


def _pieces(base, ranges, final, made_by_trace, pre_live, small, touched):
    live = []
    for s in final:
        for b in s["blocks"]:
            if b["state"] != "inactive" and b["address"] not in made_by_trace and \
                    any(a <= b["address"] < e for a, e in ranges):
                live.append(ExpPiece(b["address"], b["size"], True, b["requested_size"],
                                     b.get("frames") or [],
                                     pending=b["state"] == "active_pending_free"
                                     and b["address"] not in touched))
    for addr in sorted(pre_live):
        if any(a <= addr < e for a, e in ranges):
            requested, _stream = pre_live.pop(addr)
            live.append(ExpPiece(addr, round_size(max(requested, 1)), True, requested))
    live.sort(key=lambda p: p.address)
    min_gap = 512         # c10 should_split: under expandable segments any rest >= 512 B is cut
    pieces, cursor = [], base
    for a, e in sorted(ranges):
        if a > cursor:
            pieces.append(ExpPiece(cursor, a - cursor, False, unmapped=True))
        cursor = a
        for p in (p for p in live if a <= p.address < e):
            if p.address != cursor:
                place_gap(pieces, cursor, p.address - cursor, min_gap, ExpPiece)
            pieces.append(p)
            cursor = p.address + p.size
        if e > cursor:
            place_gap(pieces, cursor, e - cursor, min_gap, ExpPiece)
        cursor = max(cursor, e)
    return pieces


def build_expandable(alloc, reservations, translate, problems) -> list:
    """Carve ``reservations`` into ``alloc``; return [(piece, Block)] of the live and free-mapped
    pieces (free ones for the caller to free last)."""
    held = []
    # Holes are mapped for a moment before they are unmapped (c10 maps at the lowest address, so
    # pages above a hole can only be mapped through it): lend the driver that much memory, and
    # lift a memory fraction, for the rebuild only. The reservation sizes do not change.
    slack = sum(p.size for r in reservations for p in r.pieces if p.unmapped)
    driver, limit = alloc.driver, alloc.allowed_memory_maximum
    driver.other_bytes -= slack
    alloc.allowed_memory_maximum = None
    budget = SMALL_CHUNKS_BASE + SMALL_CHUNKS_PER_PIECE * sum(len(r.pieces) for r in reservations)
    try:
        for r in reservations:
            cost = _small_mallocs(r) if r.small else 0
            if cost > budget:
                problems.append(f"expandable segment {r.base:#x}: {cost} small-pool mallocs to "
                                f"rebuild, more than the {budget} this snapshot's size allows; "
                                f"not rebuilt")
                continue
            budget -= cost
            _build_one(alloc, r, translate, problems, held)
    finally:
        driver.other_bytes += slack
        alloc.allowed_memory_maximum = limit
    return held


def _small_mallocs(r) -> int:
    """How many 1 MiB mallocs rebuilding the small-pool reservation ``r`` makes."""
    span = r.pieces[-1].address + r.pieces[-1].size - r.base
    return -(-span // K_SMALL_SIZE) + sum(-(-p.size // K_SMALL_SIZE) for p in r.pieces
                                          if not p.live)


def _build_one(alloc, r, translate, problems, held):
    if True:
        span = r.pieces[-1].address + r.pieces[-1].size - r.base
        alloc.driver.next_reservations[:] = [translate(r.base)]
        try:
            whole = _map_span(alloc, r, span)
        except Exception as exc:          # the model refused: report, keep going
            problems.append(f"expandable segment {r.base:#x} ({span} bytes): {exc}")
            alloc.driver.next_reservations.clear()
            return
        alloc.driver.next_reservations.clear()
        if not whole or whole[0].ptr != translate(r.base):
            problems.append(f"expandable segment {r.base:#x} rebuilt at "
                            f"{whole[0].ptr if whole else 0:#x}")
        for blk in whole:
            alloc.free(blk)
        carved = []                      # (piece, [blocks]) in address order
        for p in _carving_order(r, problems):
            blocks = []
            for request in _chunks(p, r.small, alloc.config):
                try:
                    blocks.append(alloc.malloc(request, r.stream,
                                               (p.frames or None) if p.live else None))
                except Exception as exc:
                    problems.append(f"expandable block {p.address:#x}: {exc}")
            if blocks and blocks[0].ptr != translate(p.address):
                problems.append(f"expandable block {p.address:#x} rebuilt at {blocks[0].ptr:#x}")
            carved.append((p, blocks))
        for p, blocks in carved:
            if p.unmapped and blocks:
                for blk in blocks:           # each free merges the one before into it
                    alloc.free(blk)
                alloc.unmap_block(blocks[-1], None)   # whole pages only: a partial head stays
            else:
                held.extend((p, blk) for blk in blocks)


def _carving_order(r, problems):
    """The pieces to malloc. A free gap of at most 1 MiB in the large pool cannot be asked for
    (c10 would serve that size from the small pool): before a hole it is carved together with
    the hole (unmapping whole pages then leaves it mapped and free); at the very end it is the
    free rest and needs no malloc; between live blocks it is joined to the block before it, a
    start problem."""
    out, pieces, k = [], r.pieces, 0
    while k < len(pieces):
        p = pieces[k]
        small_gap = not r.small and not p.live and not p.unmapped and p.size <= K_SMALL_SIZE
        if small_gap and k + 1 < len(pieces) and pieces[k + 1].unmapped:
            hole = pieces[k + 1]
            out.append(ExpPiece(p.address, p.size + hole.size, False, unmapped=True))
            k += 2
            continue
        if small_gap and k + 1 == len(pieces):
            break
        if small_gap:
            problems.append(f"expandable free gap {p.address:#x} ({p.size} bytes, large pool) "
                            f"cannot be carved: joined to the block before it")
            if out:
                out[-1].size += p.size
            k += 1
            continue
        out.append(p)
        k += 1
    return out


def _map_span(alloc, r, span):
    """Map [base, base+span) with mallocs at the lowest address: one for the large pool, page
    by page (<= 1 MiB each, c10's small pool limit) for the small pool."""
    if not r.small:
        return [alloc.malloc(span, r.stream)]
    out, left = [], span
    while left:
        chunk = min(left, K_SMALL_SIZE)
        out.append(alloc.malloc(chunk, r.stream))
        left -= chunk
    return out


def _chunks(p, small, config):
    if p.live:
        ok = p.requested_size and round_size(p.requested_size, config) == p.size
        return [p.requested_size if ok else p.size]
    if not small:
        return [p.size]
    out, left = [], p.size
    while left:
        chunk = min(left, K_SMALL_SIZE)
        out.append(chunk)
        left -= chunk
    return out
