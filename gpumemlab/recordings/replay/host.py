"""Replay a recording's ``host_traces`` on the pinned host allocator model.

``replay(snap, host=True)`` runs PyTorch 2.14's host trace (``_record_memory_history(...,
record_pinned_host_memory=True)``) on ``gpumemlab.allocator.host.CachingHostAllocator``:

* **Faithful** (``alloc_conf=None``): the recorded settings; each recorded ``segment_alloc``
  (a ``cudaHostAlloc``/``cudaHostRegister``, or the reserve segment) dictates the address of the
  model's next pin (``HostMemory.reserve_next_address``), and every ``alloc`` is checked: the
  model must hand out the recorded address. A cached block is reused without a CUDA call, so an
  ``alloc`` with no ``segment_alloc`` is the model's own choice from its free list (last freed,
  first reused): that is what is checked. ``address_mismatches == 0`` means the model
  reproduced the run's host addresses.
* **What-if** (another ``alloc_conf``): the same pins and frees with the model's addresses; the
  figures (peak pinned bytes, pins made) say what the settings change.

A free is replayed at ``free_completed`` (when the real block became reusable: its copies'
events done), so the replay needs no stream timing. A recorded ``segment_free`` outside a free
(``torch.accelerator.empty_host_cache()``) gives back that one cached block (``release_cached_block``).

A trace that begins mid-run (the ring buffer wrapped) is said in ``notes``: blocks alive before
it are rebuilt from their first entry (an address first seen in a free, or reused without a
``segment_alloc``) and from ``host_segments`` blocks the trace never touches, in the free-list
order their reuse implies; an ``alloc`` with no block to reuse is a pin whose entry fell off; a
reserve segment made before the trace is rebuilt where recorded, its carves placed at their
addresses and its fill level read from them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.allocator import AllocatorConfig
from gpumemlab.allocator.host import CachingHostAllocator, HostOutOfMemoryError
from gpumemlab.allocator.host.rounding import reserve_carve
from gpumemlab.allocator.host.snapshot import host_segments
from gpumemlab.units import format_size, parse_size

from ..source import read_snapshot
from .prepare import recorded_alloc_conf
from .result import ReplayError

__all__ = ["HostReplayResult", "replay_host"]

_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")


@dataclass
class HostReplayResult:
    """What a host replay found. ``address_mismatches`` is None in a what-if (nothing recorded
    to compare); ``first_mismatch`` (entry index, recorded address, model address) the first."""
    source: str
    alloc_conf: str
    recorded_alloc_conf: str
    faithful: bool
    allocator: CachingHostAllocator
    entries: int
    replayed: int
    allocations: int
    new_blocks: int                # blocks the model pinned during the trace (not reused)
    peak_pinned_bytes: int
    address_mismatches: int | None
    segment_mismatches: int | None
    first_mismatch: tuple | None
    start_blocks: int
    final_state_matches: bool | None
    oom: dict | None = None
    notes: list = field(default_factory=list)

    @property
    def snapshot(self) -> dict:
        """The model's host state at the end, as ``host_segments`` (for gml.show(..., host=True))."""
        return {"segments": [], "device_traces": [], "host_segments": host_segments(self.allocator),
                "host_traces": []}

    def summary(self) -> str:
        kind = "faithful" if self.faithful else f"what-if ({self.alloc_conf or 'defaults'})"
        line = (f"host replay of {self.source}, {kind}: {self.replayed}/{self.entries} host "
                f"entries, {self.allocations} pins asked, {self.new_blocks} newly pinned, peak "
                f"pinned {format_size(self.peak_pinned_bytes)}")
        if self.address_mismatches is not None:
            line += (f", {self.address_mismatches} address mismatches"
                     + (f" (first at entry {self.first_mismatch[0]}: recorded "
                        f"{self.first_mismatch[1]:#x}, model {self.first_mismatch[2]:#x})"
                        if self.first_mismatch else ""))
        if self.oom:
            line += f"; out of pinned memory at entry {self.oom['index']}"
        return line

    def __repr__(self):
        return f"<HostReplayResult: {self.summary()}>"


def _reserve_of(trace, segments, config):
    """(start, size, made in the trace) of the recording's reserve segment, or None: the first
    ``segment_alloc`` of ``pinned_reserve_segment_size_mb`` bytes (the process's first pin
    makes it), else a ``pinned_reserve`` host segment."""
    size = config.pinned_reserve_segment_size_mb << 20
    if not size:
        return None
    for e in trace:
        if e["action"] == "segment_alloc" and e["size"] == size:
            return e["addr"], size, True
    for seg in segments:
        if seg.get("segment_type") == "pinned_reserve":
            return seg["address"], seg["total_size"], False
    return None


def _start_blocks(trace, segments, reserve, max_cached):
    """Blocks alive before the first entry: address -> (size, state, first reuse index).

    state: "allocated" (first seen freed), "cached" (first seen reused without a pin, or given
    back), or the recorded block state for host_segments blocks the trace never names. A block
    carved from the reserve has no pin of its own: when the reserve was made in the trace, a
    first alloc inside it is a new carve; when before, one below the start carves' end is a
    cached carve and one above it a new carve."""
    def inside(a):
        return reserve is not None and reserve[0] <= a < reserve[0] + reserve[1]

    start, seen, carve_candidates = {}, set(), {}
    for i, e in enumerate(trace):
        a, action = e.get("addr"), e["action"]
        if action not in _ACTIONS or a in seen:
            continue
        seen.add(a)
        if action == "segment_alloc":
            continue
        if action in ("free_requested", "free_completed"):
            start[a] = (e["size"], "allocated", None)
        elif action == "alloc":
            pinned_here = any(t["action"] == "segment_alloc" and t["addr"] == a
                              for t in trace[max(0, i - 1):i + 2])
            if inside(a):
                if not reserve[2]:
                    carve_candidates[a] = (e["size"], "cached", i)
            elif not pinned_here and e["size"] <= max_cached:   # else never cached: a pin
                start[a] = (e["size"], "cached", i)              # whose entry fell off
        elif action == "segment_free":
            start[a] = (e["size"], "cached", None)
    for seg in segments:
        is_reserve = seg.get("segment_type") == "pinned_reserve"
        if is_reserve and (reserve is None or reserve[2]):
            continue
        for b in seg["blocks"]:
            a = b["address"]
            if is_reserve and b["state"] == "inactive" and \
                    a + b["size"] == seg["address"] + seg["total_size"]:
                continue            # the reserve's unused rest
            if a not in seen and a not in start:
                state = "cached" if b["state"] == "inactive" else "allocated"
                start[a] = (b["size"], state, None)
    carves_end = max((a + reserve_carve(start[a][0]) for a in start if inside(a)), default=0)
    start.update({a: v for a, v in carve_candidates.items() if a < carves_end})
    return start


def _pin_start_block(alloc, addr, size, reserve, faithful):
    """One start block at its recorded address: carved where recorded inside the reserve (its
    bump pointer set there), else pinned with the reserve taken as full (it was, or the real
    allocator would have carved it)."""
    if not faithful:
        return alloc.allocate(size)
    res = alloc.reserve
    if reserve is not None and res is not None and res.initialized and res.owns(addr):
        res.current = addr
        return alloc.allocate(size)
    alloc.memory.reserve_next_address(addr)
    if res is None or not res.initialized:
        return alloc.allocate(size)
    current, res.current = res.current, res.start + res.size
    try:
        return alloc.allocate(size)
    finally:
        res.current = current


def _build_start(alloc, start, reserve, faithful):
    """Pin each start block (at its recorded address when faithful); cache the cached ones so
    that the first reused is the last pushed. -> recorded address -> model block."""
    if faithful and reserve is not None and not reserve[2]:
        alloc.memory.reserve_next_address(reserve[0])   # made by the process's first pin
        alloc._reserve_segment(0)
    blocks, end = {}, None
    for addr in sorted(start):
        blocks[addr] = _pin_start_block(alloc, addr, start[addr][0], reserve, faithful)
        if alloc.reserve is not None and alloc.reserve.owns(blocks[addr].ptr):
            end = max(end or 0, alloc.reserve.current)
    if end is not None:
        alloc.reserve.current = end
    cached = [a for a in start if start[a][1] == "cached"]
    never = float("inf")
    # free list: last freed, first reused; reused later (or never) goes in first
    for addr in sorted(cached, key=lambda a: -(start[a][2] if start[a][2] is not None else never)):
        alloc.free(blocks[addr])
    return blocks


def _final_blocks(segments) -> list:
    """(address, size, in use) of every block, the reserve's unused rest left out. A block
    freed but waiting for its copies' events is in use for this: the replay holds it until its
    free_completed, which the recording had not reached."""
    return sorted((b["address"], b["size"], b["state"] != "inactive") for s in segments
                  for b in s["blocks"]
                  if b["state"] != "inactive" or s.get("segment_type") != "pinned_reserve")


def replay_host(source, alloc_conf=None, host_memory=None) -> HostReplayResult:
    """Replay ``source``'s ``host_traces`` on the host allocator model (see the module)."""
    try:
        read = read_snapshot(source)
    except TypeError:
        raise ReplayError(f"replay(host=True) needs a snapshot (dict or file), not "
                          f"{type(source).__name__}") from None
    snap, name = read.snapshot, read.name or "snapshot"
    trace = snap.get("host_traces")
    if not trace:
        raise ReplayError(f"{name}: no host_traces to replay (record with torch>=2.14's "
                          f"_record_memory_history(..., record_pinned_host_memory=True), or "
                          f"SimulatedGPU(record_pinned_host_memory=True))")
    recorded = recorded_alloc_conf(snap)
    faithful = alloc_conf is None
    conf = recorded if faithful else str(alloc_conf)
    try:
        config = AllocatorConfig.parse(conf)
    except Exception as exc:
        raise ReplayError(f"alloc_conf {conf!r}: {exc}") from None
    total = None if host_memory is None else parse_size(host_memory, name="host_memory")
    alloc = CachingHostAllocator(config, total)
    notes = []
    segments = snap.get("host_segments") or []
    reserve = _reserve_of(trace, segments, config)
    start = _start_blocks(trace, segments, reserve, config.pinned_max_cached_size)
    by_addr = _build_start(alloc, start, reserve, faithful)
    if start:
        notes.append(f"{len(start)} pinned blocks were alive before the host trace began: "
                     f"rebuilt from their first entries and host_segments")
    if reserve is not None and not reserve[2]:
        notes.append("the reserve segment was made before the host trace began: its carves "
                     "are placed where recorded, its fill level taken from the last of them")
    pins_before = alloc.stats.allocations.allocated
    mismatches = seg_mismatches = allocations = unknown = replayed = 0
    first, oom, skip_pin = None, None, set()
    for i, e in enumerate(trace):
        action, addr, size = e["action"], e.get("addr"), e.get("size")
        replayed = i + 1
        if action not in _ACTIONS:      # oom, snapshot, unknown: nothing for the model to do
            continue
        if action == "segment_alloc":
            if faithful and i not in skip_pin:
                alloc.memory.reserve_next_address(addr)
        elif action == "alloc":
            nxt = trace[i + 1] if i + 1 < len(trace) else None
            if (faithful and nxt is not None and nxt["action"] == "segment_alloc"
                    and nxt["addr"] == addr):   # a writer that records the pin after the alloc
                alloc.memory.reserve_next_address(addr)
                skip_pin.add(i + 1)
            elif (faithful and addr not in alloc.blocks and addr not in alloc.memory.next_addresses
                  and not (alloc.reserve is not None and alloc.reserve.owns(addr))):
                # no block there to reuse: the real allocator pinned one (its segment_alloc
                # fell off the ring before the trace began)
                alloc.memory.reserve_next_address(addr)
            elif (faithful and reserve is not None and not reserve[2] and addr not in alloc.blocks
                  and alloc.reserve.owns(addr) and addr > alloc.reserve.current):
                # a new carve of a reserve made before the trace: carves before it that were
                # given back left no entry, so its address is the fill level
                alloc.reserve.current = addr
            try:
                # the request, where the writer kept it (the kit's requested_size), re-rounds
                # under a what-if's settings; else the recorded size is asked for
                block = alloc.allocate(e.get("requested_size") or size, frames=e.get("frames"))
            except HostOutOfMemoryError as exc:
                oom = {"index": i, "size": size, "message": str(exc)}
                break
            allocations += 1
            if faithful and block.ptr != addr:
                mismatches += 1
                first = first or (i, addr, block.ptr)
            by_addr[addr] = block
        elif action == "free_completed":
            block = by_addr.get(addr)
            if block is None or not block.allocated:
                unknown += 1
                continue
            alloc.free(block)
        elif action == "segment_free":
            block = by_addr.pop(addr, None)
            if block is None:
                unknown += 1
            elif alloc.blocks.get(block.ptr) is block and not alloc.release_cached_block(block.ptr):
                seg_mismatches += 1         # the model still uses it, or it waits for events
                first = first or (i, addr, block.ptr)
        # free_requested: the block stays held until its free_completed (its copies' events)
    if unknown:
        notes.append(f"{unknown} host entries name a block the replay does not hold (ignored)")
    final = None
    if faithful and oom is None and snap.get("host_segments") is not None:
        final = _final_blocks(host_segments(alloc)) == _final_blocks(snap["host_segments"])
    return HostReplayResult(
        source=name, alloc_conf=conf, recorded_alloc_conf=recorded, faithful=faithful,
        allocator=alloc, entries=len(trace), replayed=replayed, allocations=allocations,
        new_blocks=alloc.stats.allocations.allocated - pins_before,
        peak_pinned_bytes=alloc.memory.peak_pinned,
        address_mismatches=mismatches + seg_mismatches if faithful else None,
        segment_mismatches=seg_mismatches if faithful else None, first_mismatch=first,
        start_blocks=len(start), final_state_matches=final, oom=oom, notes=notes)
