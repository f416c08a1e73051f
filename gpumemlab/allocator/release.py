"""Giving memory back to CUDA: c10's ``release_available_cached_blocks``, ``release_blocks``,
``release_block`` and ``garbage_collect_cached_blocks``. ``release_cached_blocks`` (=
``emptyCache``), which also empties private pools, is in pools.py.

Only whole free segments (a block with neither ``prev`` nor ``next``) can be cudaFree'd; the
free parts of a segment that still holds a live block stay reserved. Expandable segments
instead unmap their free pages.
"""
from __future__ import annotations

from typing import Callable

from . import trace as tr
from .block import BlockPool
from .config import AllocatorConfig
from .constants import SIZE_MAX
from .driver import CudaDriver
from .stats import DeviceStats, update_stat_array


class ReleaseMixin:
    """The memory-releasing part of ``DeviceCachingAllocator``; it owns no state."""

    # Owned by the allocator core (caching_allocator.py):
    config: AllocatorConfig
    driver: CudaDriver
    stats: DeviceStats
    large_blocks: BlockPool
    small_blocks: BlockPool
    total_allocated_memory: int
    # Owned by the other parts: SettingsMixin, EventsMixin, ExpandableOpsMixin, HistoryMixin.
    allowed_memory_maximum: int | None
    unmap_block: Callable  # (block, context)
    release_expandable_segment: Callable  # (block)
    record_trace: Callable  # (action, addr, size, stream, context, pool_id)
    note_private_segment: Callable  # PoolsMixin: (pool, reserved bytes, segments)

    def release_available_cached_blocks(self, p, context) -> bool:
        """With ``max_split_size`` set: free one oversize cached block big enough for the
        request, else the largest oversize blocks until enough is released."""
        max_split_size = self.config.max_split_size
        if max_split_size == SIZE_MAX:
            return False
        pool = p.pool
        stream = p.stream
        key_size = max(p.size, max_split_size)
        found = pool.lower_bound(stream, key_size)
        if found is None or found.stream != stream or found.expandable_segment is not None:
            # No single (non-expandable) block is large enough; free multiple oversize blocks,
            # starting with the largest. Expandable blocks are skipped: their memory is
            # returned by unmapping pages.
            block = pool.block_before(stream, key_size)  # the largest block for this stream
            if block is None:
                return False
            total_released = 0
            while (total_released < key_size and block.size >= max_split_size
                   and block.stream == stream):
                cur = block
                block = pool.prev_block(cur)  # step back before cur leaves the pool
                if cur.expandable_segment is None:
                    total_released += cur.size
                    self.release_block(cur, context)
                if block is None:
                    break
            if total_released < key_size:
                return False
        else:
            self.release_block(found, context)
        return True

    def release_blocks(self, pool, context) -> None:
        to_unmap = []
        for block in pool.blocks():
            if block.expandable_segment is not None:
                # Unmapping mutates the pool, so gather these first.
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self.release_block(block, context)
        for block in to_unmap:
            self.unmap_block(block, context)
            if block.prev is None and block.next is None:
                self.release_expandable_segment(block)

    def release_block(self, block, context) -> None:
        """cudaFree a free segment.

        As in c10, nothing checks that the block is a whole segment: every caller picks one
        except ``release_available_cached_blocks`` after ``max_split_size`` was lowered at run
        time, where a split block can be at or above the new threshold. cudaFree of an address
        inside a segment then fails with cudaErrorInvalidValue, which c10's ``C10_CUDA_CHECK``
        raises (``CudaError`` here) after the ``segment_free`` entry and ``num_device_free`` were
        recorded; the block stays cached.
        """
        assert block.expandable_segment is None
        stats = self.stats
        stats.num_device_free += 1
        self.record_trace(tr.SEGMENT_FREE, block.ptr, block.size, block.stream,
                          context if context is not None else block.context_when_segment_allocated,
                          block.pool.mempool_id)
        self.driver.cuda_free(block.ptr)
        self.total_allocated_memory -= block.size
        pool = block.pool
        if pool.owner_private_pool is not None:
            self.note_private_segment(pool, -block.size, segments=-1)
        update_stat_array(pool.stats.segment, -1)
        update_stat_array(pool.stats.reserved_bytes, -block.size)
        if block.size >= self.config.max_split_size:
            stats.oversize_segments.decrease(1)
        pool.erase(block)

    def garbage_collect_cached_blocks(self, context) -> None:
        """Free old, whole, large cached segments once reserved memory passes
        ``garbage_collection_threshold`` of the allowed maximum (no synchronization)."""
        gc_threshold = int(self.config.garbage_collection_threshold * self.allowed_memory_maximum)
        # No need to trigger GC yet
        if self.total_allocated_memory <= gc_threshold:
            return
        target_size = self.total_allocated_memory - gc_threshold
        gc_reclaimed = 0
        large = self.large_blocks

        def freeable(b):
            return not b.is_split() and b.expandable_segment is None

        total_age = 0
        freeable_block_count = 0
        for b in large.blocks():
            if freeable(b):
                total_age += b.gc_count()
                freeable_block_count += 1
        if freeable_block_count == 0:
            return
        block_freed = True
        while gc_reclaimed < target_size and block_freed and freeable_block_count > 0:
            # Free blocks of at least the average age; do not stop at the target, so that GC
            # is not triggered again too soon.
            age_threshold = total_age / freeable_block_count
            block_freed = False
            for block in large.blocks():
                if freeable(block) and block.gc_count() >= age_threshold:
                    block_freed = True
                    gc_reclaimed += block.size
                    total_age -= block.gc_count()
                    freeable_block_count -= 1
                    self.release_block(block, context)
