"""The allocator's layout as a snapshot reader sees it: segments and their live blocks.

This is not an allocator. It never chooses an address: it only applies trace entries
(``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``,
``segment_map``, ``segment_unmap``) at the addresses PyTorch recorded, the way MemoryViz's
"Allocator State History" redraws a snapshot at any event. Free memory is not stored: because
c10 always merges adjacent free blocks (``try_merge_blocks``), every gap between live blocks of a
segment is exactly one free block, so live blocks plus segment bounds give the whole block map.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

ALLOCATED, PENDING, INACTIVE = "active_allocated", "active_pending_free", "inactive"


class Seg:
    """One segment: an address range from cudaMalloc, or one mapped run of an expandable segment."""

    __slots__ = ("address", "size", "pool", "stream", "expandable", "starts", "blocks", "pool_id")

    def __init__(self, address, size, pool="large", stream=0, expandable=False, pool_id=(0, 0)):
        self.address, self.size, self.pool = address, size, pool
        self.stream, self.expandable = stream, expandable
        self.pool_id = tuple(pool_id)  # segment_pool_id: the private pool it belongs to
        self.starts = []  # sorted addresses of live blocks
        self.blocks = {}  # address -> [size (None if not yet known), requested_size, state]

    @property
    def end(self) -> int:
        return self.address + self.size

    def copy(self) -> "Seg":
        new = Seg(self.address, self.size, self.pool, self.stream, self.expandable, self.pool_id)
        new.starts = list(self.starts)
        new.blocks = {a: list(b) for a, b in self.blocks.items()}
        return new

    def gap_end(self, address: int) -> int:
        """End of the free gap starting at ``address``: the next live block or the segment end."""
        i = bisect_right(self.starts, address)
        return self.starts[i] if i < len(self.starts) else self.end

    def gap_containing(self, address: int):
        """(start, end) of the free gap around ``address``, or None if a live block covers it."""
        i = bisect_right(self.starts, address)
        start = self.address
        if i:
            prev = self.starts[i - 1]
            prev_size = self.blocks[prev][0] or 0
            if prev + prev_size > address:
                return None
            start = prev + prev_size
        end = self.starts[i] if i < len(self.starts) else self.end
        return start, end

    def layout(self):
        """Every block, free gaps included, in address order: (address, size, requested, state)."""
        out, cursor = [], self.address
        for a in self.starts:
            size, requested, state = self.blocks[a]
            if a > cursor:
                out.append((cursor, a - cursor, 0, INACTIVE))
            out.append((a, size, requested, state))
            cursor = a + size
        if cursor < self.end:
            out.append((cursor, self.end - cursor, 0, INACTIVE))
        return out


class AllocatorState:
    """Segments by address, with running totals kept as entries are applied."""

    def __init__(self):
        self.segs = {}  # address -> Seg
        self.addrs = []  # sorted segment addresses
        self.reserved_bytes = self.allocated_bytes = self.active_bytes = 0
        self.requested_bytes = 0

    # ---- queries
    def find(self, address: int):
        """The segment containing ``address``, or None."""
        i = bisect_right(self.addrs, address) - 1
        if i >= 0:
            seg = self.segs[self.addrs[i]]
            if address < seg.end:
                return seg
        return None

    def index(self, seg: Seg) -> int:
        """The segment's number in address order ('seg N' in the views)."""
        return bisect_left(self.addrs, seg.address)

    def copy(self) -> "AllocatorState":
        new = AllocatorState.__new__(AllocatorState)
        new.segs = {a: s.copy() for a, s in self.segs.items()}
        new.addrs = list(self.addrs)
        new.reserved_bytes, new.allocated_bytes = self.reserved_bytes, self.allocated_bytes
        new.active_bytes, new.requested_bytes = self.active_bytes, self.requested_bytes
        return new

    # ---- segments
    def add_seg(self, seg: Seg) -> Seg:
        self.segs[seg.address] = seg
        insort(self.addrs, seg.address)
        self.reserved_bytes += seg.size
        return seg

    def remove_seg(self, seg: Seg) -> None:
        for a in list(seg.starts):
            self.remove_block(seg, a)
        del self.segs[seg.address]
        self.addrs.pop(bisect_left(self.addrs, seg.address))
        self.reserved_bytes -= seg.size

    def map_range(self, address: int, size: int, pool: str, stream: int,
                  pool_id=(0, 0)) -> Seg:
        """Expandable segments: pages mapped at ``address`` join the run they touch."""
        before = self.find(address - 1) if address else None
        if before is not None and before.end == address and before.expandable:
            before.size += size
            self.reserved_bytes += size
            seg = before
        else:
            seg = self.add_seg(Seg(address, size, pool, stream, True, pool_id))
        after = self.segs.get(seg.end)
        if after is not None and after.expandable:
            # two runs now touch: one SegmentInfo per contiguous mapped run
            self.addrs.pop(bisect_left(self.addrs, after.address))
            del self.segs[after.address]
            seg.size += after.size
            for a in after.starts:
                seg.starts.append(a)
                seg.blocks[a] = after.blocks[a]
        return seg

    def unmap_range(self, address: int, size: int) -> None:
        """Expandable segments: unmapped pages leave the run, possibly cutting it in two."""
        seg = self.find(address)
        if seg is None:
            return
        end = min(address + size, seg.end)
        tail_size = seg.end - end
        for a in [a for a in seg.starts if address <= a < end]:
            self.remove_block(seg, a)
        self.reserved_bytes -= end - address
        if tail_size:
            tail = Seg(end, tail_size, seg.pool, seg.stream, True, seg.pool_id)
            for a in [a for a in seg.starts if a >= end]:
                tail.starts.append(a)
                tail.blocks[a] = seg.blocks.pop(a)
            seg.starts = [a for a in seg.starts if a < end]
            self.segs[end] = tail
            insort(self.addrs, end)
        seg.size = address - seg.address
        if seg.size == 0:
            del self.segs[seg.address]
            self.addrs.pop(bisect_left(self.addrs, seg.address))

    # ---- blocks
    def add_block(self, seg: Seg, address: int, size, requested: int, state: str) -> None:
        if address in seg.blocks:
            self.remove_block(seg, address)
        insort(seg.starts, address)
        seg.blocks[address] = [size, requested, state]
        self._count(size or 0, requested, state, +1)

    def remove_block(self, seg: Seg, address: int):
        block = seg.blocks.pop(address)
        seg.starts.pop(bisect_left(seg.starts, address))
        self._count(block[0] or 0, block[1], block[2], -1)
        return block

    def set_state(self, seg: Seg, address: int, state: str) -> None:
        block = seg.blocks[address]
        self._count(block[0] or 0, block[1], block[2], -1)
        block[2] = state
        self._count(block[0] or 0, block[1], state, +1)

    def set_size(self, seg: Seg, address: int, size: int) -> None:
        block = seg.blocks[address]
        self._count(block[0] or 0, block[1], block[2], -1)
        block[0] = size
        self._count(size, block[1], block[2], +1)

    def _count(self, size, requested, state, sign) -> None:
        self.active_bytes += sign * size
        self.requested_bytes += sign * requested
        if state == ALLOCATED:
            self.allocated_bytes += sign * size

    # ---- output
    def segments(self, device: int = 0) -> list:
        """The state as PyTorch snapshot segment dicts (free gaps as 'inactive' blocks)."""
        out = []
        for a in self.addrs:
            seg = self.segs[a]
            blocks = [{"address": addr, "size": size, "requested_size": req, "state": state,
                       "frames": []} for addr, size, req, state in seg.layout()]
            out.append({
                "device": device, "address": seg.address, "total_size": seg.size,
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == ALLOCATED),
                "active_size": sum(b["size"] for b in blocks if b["state"] != INACTIVE),
                "requested_size": sum(b["requested_size"] for b in blocks
                                      if b["state"] != INACTIVE),
                "stream": seg.stream, "segment_type": seg.pool, "segment_pool_id": seg.pool_id,
                "is_expandable": seg.expandable, "frames": [], "blocks": blocks})
        return out

    @classmethod
    def from_segments(cls, segments) -> "AllocatorState":
        """Load snapshot segments; the free blocks vanish into gaps (merged, as c10 keeps them)."""
        state = cls()
        for s in sorted(segments, key=lambda s: s["address"]):
            seg = state.add_seg(Seg(s["address"], s["total_size"], s.get("segment_type", "large"),
                                    s.get("stream", 0), bool(s.get("is_expandable", False)),
                                    s.get("segment_pool_id") or (0, 0)))
            offset = s["address"]
            for b in s["blocks"]:
                addr = b.get("address", offset)
                if b["state"] != INACTIVE:
                    state.add_block(seg, addr, b["size"], b.get("requested_size", b["size"]),
                                    b["state"])
                offset = addr + b["size"]
        return state
