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

Where the trace does not allow an exact replay, the result says so in ``notes``: blocks alive
before the trace began are rebuilt from their first entry (an address first seen in a free, or
reused without a ``segment_alloc``) and from ``host_segments`` blocks the trace never touches;
their order in a free list is inferred from when the trace reuses them. Blocks carved from a
reserve segment made before the trace began are pinned where recorded but not carved.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.allocator import AllocatorConfig
from gpumemlab.allocator.host import CachingHostAllocator, HostOutOfMemoryError
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


def _start_blocks(trace, segments):
    """Blocks alive before the first entry: address -> (size, state, first reuse index).

    state: "allocated" (first seen freed), "cached" (first seen reused without a pin, or given
    back), or the recorded block state for host_segments blocks the trace never names."""
    start, seen = {}, set()
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
            if not pinned_here:
                start[a] = (e["size"], "cached", i)
        elif action == "segment_free":
            start[a] = (e["size"], "cached", None)
    for seg in segments:
        if seg.get("segment_type") == "pinned_reserve":
            continue
        for b in seg["blocks"]:
            if b["address"] not in seen and b["address"] not in start:
                state = "cached" if b["state"] == "inactive" else "allocated"
                start[b["address"]] = (b["size"], state, None)
    return start


def _build_start(alloc, start, faithful):
    """Pin each start block (at its recorded address when faithful); cache the cached ones so
    that the first reused is the last pushed. -> recorded address -> model block."""
    blocks = {}
    for addr in sorted(start):
        size = start[addr][0]
        if faithful:
            alloc.memory.reserve_next_address(addr)
        blocks[addr] = alloc.allocate(size)
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
    start = _start_blocks(trace, snap.get("host_segments") or [])
    by_addr = _build_start(alloc, start, faithful)
    if start:
        notes.append(f"{len(start)} pinned blocks were alive before the host trace began: "
                     f"rebuilt from their first entries and host_segments")
    if any(s.get("segment_type") == "pinned_reserve" for s in snap.get("host_segments") or []) \
            and not any(e["action"] == "segment_alloc" and e["size"] ==
                        config.pinned_reserve_segment_size_mb * 2**20 for e in trace):
        notes.append("the reserve segment was made before the host trace began: its carves are "
                     "pinned where recorded, not carved from it")
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
