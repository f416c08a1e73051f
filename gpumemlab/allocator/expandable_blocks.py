"""The allocator's side of expandable segments (c10 ``find_expandable_block``, ``map_block``,
``try_allocate_expandable_block``, ``unmap_block``, ``release_expandable_segment``).

With ``expandable_segments:True`` a miss does not cudaMalloc a new segment: it maps more pages
at the lowest address of a per-(pool, stream) segment where free-then-unmapped space fits the
*rounded request*, so growth comes in whole pages (2 MiB small; the large segment size, 20 MiB
by default, large) and the new
pages merge with the free block before them.
"""
from __future__ import annotations

from typing import Callable

from . import trace as tr
from .block import Block
from .config import AllocatorConfig
from .constants import K_SMALL_BUFFER
from .driver import CudaDriver
from .expandable_segment import ExpandableSegment
from .stats import DeviceStats, update_stat_array


def _allocatable(b) -> bool:
    return b is not None and not b.allocated and b.event_count == 0 and not b.stream_uses


class ExpandableOpsMixin:
    """The expandable-segments part of ``DeviceCachingAllocator``."""

    # Owned by this part:
    expandable_segments_: list  # the live ExpandableSegments
    # Owned by the allocator core (caching_allocator.py) and HistoryMixin:
    config: AllocatorConfig
    driver: CudaDriver
    stats: DeviceStats
    total_allocated_memory: int
    try_merge_blocks: Callable  # (dst, src, pool) -> bytes subsumed
    record_trace: Callable  # (action, addr, size, stream, context, pool_id)
    note_private_segment: Callable  # PoolsMixin: (pool, reserved bytes, segments)

    def _init_expandable(self) -> None:
        self.expandable_segments_ = []

    def find_expandable_block(self, device, stream, pool, size):
        """The lowest-address run of free and unmapped space of ``size`` bytes, or a new segment."""
        def has_available_address_space(b):
            nbytes = 0
            while nbytes < size and _allocatable(b):
                nbytes += b.size
                b = b.next
            return nbytes >= size

        for c in pool.unmapped_from(stream):
            # The lowest unmapped space, and a free block just before it may join in.
            if _allocatable(c.prev):
                c = c.prev
            if has_available_address_space(c):
                return c
        segment_size = K_SMALL_BUFFER if pool.is_small else self.config.large_segment_size
        total = self.driver.total_memory
        # Address space for 1 1/8 of the device, so pages can be remapped at the end.
        es = ExpandableSegment(self.driver, stream, total + total // 8, segment_size)
        self.expandable_segments_.append(es)
        candidate = Block(device, stream, es.size(), pool, es.ptr)
        candidate.mapped = False
        candidate.expandable_segment = es
        pool.insert_unmapped(candidate)
        return candidate

    def map_block(self, to_map, size, context) -> bool:
        assert not to_map.mapped and size <= to_map.size
        es = to_map.expandable_segment
        mapped_ptr, mapped_size = es.map(to_map.ptr, size)
        if mapped_size == 0:
            return False  # failed to map the memory: out of memory
        pool = to_map.pool
        pool.erase_unmapped(to_map)
        to_map.mapped = True
        if mapped_size < to_map.size:
            # to_map -> remaining -> to_map.next
            remaining = Block(to_map.device, to_map.stream, to_map.size - mapped_size, pool,
                              to_map.ptr + mapped_size)
            remaining.mapped = False
            remaining.expandable_segment = es
            remaining.splice(to_map, to_map.next)
            pool.insert_unmapped(remaining)
            to_map.size = mapped_size
        self.try_merge_blocks(to_map, to_map.prev, pool)
        self.try_merge_blocks(to_map, to_map.next, pool)
        pool.insert_into_blocks(to_map)
        self.total_allocated_memory += mapped_size
        update_stat_array(pool.stats.reserved_bytes, mapped_size)
        if pool.owner_private_pool is not None:
            self.note_private_segment(pool, mapped_size, segments=0)
        self.stats.num_device_alloc += 1
        self.record_trace(tr.SEGMENT_MAP, mapped_ptr, mapped_size, to_map.stream, context,
                          pool.mempool_id)
        if to_map.prev is None and to_map.context_when_segment_allocated is None:
            to_map.context_when_segment_allocated = context
        return True

    def try_allocate_expandable_block(self, device, stream, pool, size, context):
        candidate = self.find_expandable_block(device, stream, pool, size)
        # candidate is one of: unmapped -> null | unmapped -> free -> * | free -> unmapped -> *
        if not candidate.mapped and not self.map_block(candidate, min(candidate.size, size), context):
            return None
        while candidate.size < size:
            # free -> unmapped -> *: map some of the unmapped space and merge into the free block
            remaining = size - candidate.size
            new_candidate = candidate.next
            if not self.map_block(new_candidate, min(remaining, new_candidate.size), context):
                return None
            candidate = new_candidate
        pool.erase(candidate)
        return candidate

    def unmap_block(self, block, context) -> None:
        """Unmap the whole pages inside a free expandable block; keep the partial pages mapped."""
        es = block.expandable_segment
        unmapped_ptr, unmapped_size = es.unmap(block.ptr, block.size)
        if unmapped_size == 0:
            return
        pool = block.pool
        pool.erase(block)
        before_size = unmapped_ptr - block.ptr
        if before_size > 0:
            # prev? -> before_free -> block
            before_free = Block(block.device, block.stream, before_size, pool, block.ptr)
            before_free.expandable_segment = es
            before_free.splice(block.prev, block)
            pool.insert_into_blocks(before_free)
        after_size = block.size - (before_size + unmapped_size)
        if after_size > 0:
            # block -> after_free -> next?
            after_free = Block(block.device, block.stream, after_size, pool,
                               unmapped_ptr + unmapped_size)
            after_free.expandable_segment = es
            after_free.splice(block, block.next)
            pool.insert_into_blocks(after_free)
        block.ptr = unmapped_ptr
        block.size = unmapped_size
        block.mapped = False
        self.try_merge_blocks(block, block.prev, pool)
        self.try_merge_blocks(block, block.next, pool)
        pool.insert_unmapped(block)
        self.total_allocated_memory -= unmapped_size
        update_stat_array(pool.stats.reserved_bytes, -unmapped_size)
        if pool.owner_private_pool is not None:
            # c10 counts one cudaMalloc fewer per unmap (see pools.note_private_segment)
            self.note_private_segment(pool, -unmapped_size, segments=-1)
        self.stats.num_device_free += 1
        self.record_trace(tr.SEGMENT_UNMAP, unmapped_ptr, unmapped_size, block.stream,
                          context if context is not None else block.context_when_segment_allocated,
                          pool.mempool_id)

    def release_expandable_segment(self, block) -> None:
        es = block.expandable_segment
        assert block.size == es.size(), "block disagrees with segment"
        assert not block.mapped
        self.expandable_segments_.remove(es)
        block.pool.erase_unmapped(block)
        es.release()
