"""``Block`` and ``BlockPool``: the allocator's view of memory (c10 ``Block``, ``BlockPool``).

A segment (one cudaMalloc, or one mapped run of an expandable segment) is a doubly linked chain
of Blocks through ``prev``/``next``, in address order. A pool keeps its free, mapped blocks
ordered by ``BlockComparatorSize`` = (stream, size, address) so the best fit is a
``lower_bound``; expandable segments keep their unmapped address space in ``unmapped``, ordered
by ``BlockComparatorAddress`` = (stream, address).

The (stream, size, address) order is kept as one int per block, ``size_key``: stream, size and
address side by side in 64-bit fields, so ints compare exactly as the tuples would (sizes and
addresses are below 2**64, as ``size_t`` and pointers are), in a :class:`SortedKeys`.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from .constants import AGGREGATE, LARGE_POOL, SMALL_POOL
from .sorted_keys import SortedKeys


def size_key(stream: int, size: int, ptr: int) -> int:
    """``BlockComparatorSize`` order as one int: (stream, size, ptr) in 64-bit fields."""
    return (stream << 128) | (size << 64) | ptr


_PTR_MASK = (1 << 64) - 1


class Block:
    """One piece of a segment (c10 ``Block``)."""

    __slots__ = ("device", "stream", "stream_uses", "size", "requested_size", "pool", "ptr",
                 "allocated", "mapped", "prev", "next", "event_count", "gc_count_base",
                 "context_when_allocated", "context_when_segment_allocated",
                 "expandable_segment")

    def __init__(self, device, stream, size, pool, ptr):
        self.device = device
        self.stream = stream
        self.stream_uses = None  # dict used as an ordered set of streams, or None when empty
        self.size = size
        self.requested_size = 0
        self.pool = pool
        self.ptr = ptr
        self.allocated = False
        self.mapped = True
        self.prev = None
        self.next = None
        self.event_count = 0
        self.gc_count_base = 0
        self.context_when_allocated = None
        self.context_when_segment_allocated = None
        self.expandable_segment = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def gc_count(self) -> int:
        """How many free-block searches of its pool this block has sat through."""
        return self.pool.get_free_blocks_call_count - self.gc_count_base

    def splice(self, before, after) -> None:
        """Insert this block between ``before`` and ``after`` in the chain."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after

    def is_active(self) -> bool:
        """Allocated, or freed but waiting on another stream's events."""
        return self.allocated or self.event_count > 0 or bool(self.stream_uses)

    def __repr__(self):
        state = "allocated" if self.allocated else ("pending" if self.is_active() else "free")
        return (f"Block(ptr={self.ptr:#x}, size={self.size}, stream={self.stream}, {state}"
                f"{'' if self.mapped else ', unmapped'})")


class BlockPool:
    """Free blocks of one pool (small or large), ordered like c10's ``std::set`` comparators."""

    __slots__ = ("is_small", "stat_types", "stats", "keys", "by_ptr", "unmapped_keys",
                 "unmapped_by_ptr", "get_free_blocks_call_count", "owner_private_pool",
                 "mempool_id")

    def __init__(self, is_small: bool):
        self.is_small = is_small
        # c10 get_stat_types_for_pool: the aggregate plus this pool's own StatType
        self.stat_types = (AGGREGATE, SMALL_POOL if is_small else LARGE_POOL)
        self.stats = None  # its allocator's SelectedStats for stat_types, set by the allocator
        self.keys = SortedKeys()  # size_key of each free mapped block
        self.by_ptr = {}  # ptr -> Block for the blocks in `keys`
        self.unmapped_keys = []  # sorted (stream, ptr) of unmapped expandable space
        self.unmapped_by_ptr = {}
        self.get_free_blocks_call_count = 0
        self.owner_private_pool = None
        self.mempool_id = (0, 0)  # c10 owner_MempoolId(): the owner's id, (0, 0) by default

    # --- blocks (BlockComparatorSize) ---------------------------------------------------
    def insert_into_blocks(self, block: Block) -> None:
        """c10 ``BlockPool::insert_into_blocks``: insert and restart the block's GC age."""
        block.gc_count_base = self.get_free_blocks_call_count
        self.keys.add((block.stream << 128) | (block.size << 64) | block.ptr)  # size_key
        self.by_ptr[block.ptr] = block

    def erase(self, block: Block) -> None:
        try:
            self.keys.remove((block.stream << 128) | (block.size << 64) | block.ptr)  # size_key
        except KeyError:
            raise AssertionError(f"{block!r} is not in the free pool") from None
        del self.by_ptr[block.ptr]

    def contains(self, block: Block) -> bool:
        return self.by_ptr.get(block.ptr) is block

    def _block(self, key):
        return None if key is None else self.by_ptr[key & _PTR_MASK]

    def lower_bound(self, stream: int, size: int):
        """The first free block ordered at or after (stream, size, address 0), or None."""
        key = self.keys.ceiling((stream << 128) | (size << 64))  # size_key(stream, size, 0)
        return None if key is None else self.by_ptr[key & _PTR_MASK]

    def next_block(self, block: Block):
        """The free block after ``block`` in comparator order (``++it``), or None."""
        return self._block(self.keys.higher(size_key(block.stream, block.size, block.ptr)))

    def block_before(self, stream: int, size: int):
        """The last free block ordered before (stream, size, address 0) (``--lower_bound``)."""
        return self._block(self.keys.lower(size_key(stream, size, 0)))

    def prev_block(self, block: Block):
        """The free block before ``block`` in comparator order (``--it``), or None."""
        return self._block(self.keys.lower(size_key(block.stream, block.size, block.ptr)))

    def blocks(self) -> list:
        """The free blocks in comparator order (a copy: safe to mutate the pool meanwhile)."""
        by_ptr = self.by_ptr
        return [by_ptr[k & _PTR_MASK] for k in self.keys]

    def __len__(self):
        return len(self.keys)

    # --- unmapped (BlockComparatorAddress) ----------------------------------------------
    def insert_unmapped(self, block: Block) -> None:
        insort(self.unmapped_keys, (block.stream, block.ptr))
        self.unmapped_by_ptr[block.ptr] = block

    def erase_unmapped(self, block: Block) -> None:
        key = (block.stream, block.ptr)
        i = bisect_left(self.unmapped_keys, key)
        if i == len(self.unmapped_keys) or self.unmapped_keys[i] != key:
            raise AssertionError(f"{block!r} is not in the unmapped set")
        del self.unmapped_keys[i]
        del self.unmapped_by_ptr[block.ptr]

    def unmapped_from(self, stream) -> list:
        """Unmapped blocks of ``stream`` in address order (c10: ``unmapped.lower_bound``)."""
        i = bisect_left(self.unmapped_keys, (stream, 0))
        out = []
        for s, ptr in self.unmapped_keys[i:]:
            if s != stream:
                break
            out.append(self.unmapped_by_ptr[ptr])
        return out

    def unmapped_blocks(self) -> list:
        return [self.unmapped_by_ptr[k[1]] for k in self.unmapped_keys]
