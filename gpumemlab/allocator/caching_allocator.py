"""``DeviceCachingAllocator``: PyTorch's CUDA caching allocator for one device, in Python.

Follows c10/cuda/CUDACachingAllocator.cpp function by function, with c10's names:
``malloc`` (the fallback chain), ``get_free_block``, ``should_split``, ``alloc_block``,
``alloc_found_block``, ``free``, ``free_block`` and ``try_merge_blocks``. Private pools and
CUDA graph capture (``get_pool``, ``try_mempool_fallback``, ``release_cached_blocks``) are in
``pools.py``. The other parts of
c10's ``DeviceCachingAllocator`` are mixins, each declaring the attributes it uses: history
(``record_trace``) in ``history.py``, streams and events (``record_stream``) in ``events.py``,
releasing memory (``release_available_cached_blocks``, ``release_blocks`` and friends) in
``release.py``, expandable segments in ``expandable_blocks.py``, snapshots in ``snapshot.py``,
run-time settings in ``runtime_settings.py``. The size rules (oversize blocks, splitting) are in ``fit.py``, and
statistics are updated through ``stats.update_stat_array`` (c10 ``for_each_selected_stat_type``).

The model is a pure state machine: no clock, no randomness, no I/O. Streams are integers
(0 is the default stream). Events recorded by ``record_stream`` complete the next time the
allocator looks at them (the next ``malloc``, or ``empty_cache``/an OOM retry), i.e. the other
stream is assumed to have finished its work by then.
"""
from __future__ import annotations

import sys

from . import trace as tr
from .block import Block, BlockPool
from .config import AllocatorConfig
from .constants import ONE_EXA_BYTES, SIZE_MAX, STAT_TYPE_NAMES
from .driver import CudaDriver
from .events import EventsMixin, _check_stream
from .expandable_blocks import ExpandableOpsMixin
from .fit import oversize_allows, should_split
from .history import HistoryMixin
from .invariants import check_invariants
from .oom import EXA_MESSAGE, OutOfMemoryError, oom_message
from .pools import PoolsMixin
from .release import ReleaseMixin
from .rounding import get_allocation_size, round_size
from .runtime_settings import SettingsMixin
from .sizes import format_size
from .snapshot import SnapshotMixin
from .stats import DeviceStats, SelectedStats, max_split_size_stat, update_stat_array


class AllocParams:
    """c10 ``AllocParams``: one request on its way through ``malloc``."""

    __slots__ = ("device", "stream", "size", "pool", "alloc_size", "block", "err", "stat_types",
                 "expandable_active")

    def __init__(self, device, size, stream, pool, alloc_size, expandable_active):
        self.device = device
        self.stream = stream
        self.size = size  # rounded request
        self.pool = pool
        self.alloc_size = alloc_size  # segment size if a new one is needed
        self.block = None
        self.err = None
        self.stat_types = pool.stats  # get_stat_types_for_pool, as the selected Stats
        # is_expandable_segments_active: the setting (c10 turns it off for pools with a
        # pluggable allocator, which the model does not have)
        self.expandable_active = expandable_active


def _check_size(value, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of bytes, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")


class DeviceCachingAllocator(HistoryMixin, SettingsMixin, EventsMixin, PoolsMixin, ReleaseMixin,
                             ExpandableOpsMixin, SnapshotMixin):
    """The caching allocator of one (simulated) device."""

    def __init__(self, total_memory: int, config: AllocatorConfig | None = None, device: int = 0,
                 record_history: bool = True, max_entries: int = sys.maxsize,
                 record_context: str | None = "all", other_memory: int = 0):
        _check_size(total_memory, "total_memory")
        _check_size(other_memory, "other_memory")
        if other_memory >= total_memory:
            raise ValueError("other_memory (held outside the allocator) must be less than total_memory")
        # The allocator core's own state; each mixin's _init_* sets the state that part owns.
        self.device = device
        self.driver = CudaDriver(total_memory, other_memory)
        self.config = config if config is not None else AllocatorConfig()
        self.stats = DeviceStats()
        self.stats.max_split_size = max_split_size_stat(self.config.max_split_size)
        self.large_blocks = BlockPool(is_small=False)
        self.small_blocks = BlockPool(is_small=True)
        for pool in (self.large_blocks, self.small_blocks):
            pool.stats = SelectedStats(self.stats, pool.stat_types)
        self.active_blocks = {}  # ptr -> Block, allocated or pending free
        self.total_allocated_memory = 0  # reserved bytes, as c10 names it
        self._init_events()
        self._init_expandable()
        self._init_history(record_history, record_context, max_entries)
        self._init_settings()
        self._init_pools()

    # ------------------------------------------------------------------ malloc
    def malloc(self, orig_size: int, stream: int = 0, context=None) -> Block:
        """Allocate ``orig_size`` bytes on ``stream``; raises :class:`OutOfMemoryError`."""
        if type(orig_size) is not int or orig_size < 0:  # noqa: E721  (bools and floats too)
            _check_size(orig_size, "size")
        if type(stream) is not int or stream < 0:  # noqa: E721
            _check_stream(stream)
        if orig_size >= ONE_EXA_BYTES:
            raise OutOfMemoryError(EXA_MESSAGE, requested_size=orig_size, device=self.device)
        if self.record_context_ < tr.STATE:
            context = None
        # No event queries during a graph capture (illegal while capturing): defer them.
        if (self.cuda_events or self.deferred_blocks) and not self.num_active_captures:
            self.process_events(context)
        config = self.config
        size = round_size(orig_size, config)
        pool = self.get_pool(size, stream)
        alloc_size = get_allocation_size(size, config.large_segment_size)
        p = AllocParams(self.device, size, stream, pool, alloc_size, config.expandable_segments)

        # First, try to get a block from the existing pool (callbacks: none registered here).
        block_found = self.get_free_block(p)
        if not block_found:
            # Do garbage collection if the flag is set.
            if self._gc_enabled():
                self.garbage_collect_cached_blocks(context)
            block_found = (
                # Attempt allocate
                self.alloc_block(p, False, context)
                # Try pools that opted in as overflow before expensive freeing (use_on_oom).
                or self.try_mempool_fallback(p)
                # Free enough available cached blocks to satisfy alloc and retry alloc.
                or (self.release_available_cached_blocks(p, context)
                    and self.alloc_block(p, False, context))
                # Free all non-split cached blocks and retry alloc (not during a graph capture).
                or (not self.num_active_captures and self.release_cached_blocks(context)
                    and self.alloc_block(p, True, context)))
        if not block_found:
            self._raise_oom(p, orig_size, context)
        split_remainder = self.should_split(p.block, p.size, p.expandable_active)
        return self.alloc_found_block(p, orig_size, context, split_remainder)

    def _raise_oom(self, p: AllocParams, orig_size: int, context):
        device_free, device_total = self.driver.mem_get_info()
        allowed_info = ""
        if self.set_fraction:
            allowed_info = format_size(self.allowed_memory_maximum) + " allowed; "
        self.record_trace(tr.OOM, device_free, p.size, p.stream, context, p.pool.mempool_id)
        self.stats.num_ooms += 1
        allocated_bytes = self.stats.allocated_bytes[0].current
        reserved_bytes = self.stats.reserved_bytes[0].current
        message = oom_message(alloc_size=p.alloc_size, device=self.device, device_total=device_total,
                              device_free=device_free, allowed_info=allowed_info, proc_info="",
                              allocated_bytes=allocated_bytes, reserved_bytes=reserved_bytes,
                              allocated_in_private_pools=self.allocated_in_private_pools())
        raise OutOfMemoryError(message, requested_size=orig_size, size=p.size,
                               alloc_size=p.alloc_size, device_free=device_free,
                               device_total=device_total, device=self.device)

    def get_free_block(self, p: AllocParams) -> bool:
        """Best fit: the smallest free block >= size on the same stream, lowest address first."""
        pool = p.pool
        config = self.config
        if self.allowed_memory_maximum is not None and config.garbage_collection_threshold > 0.0:
            # Track block reuse interval only when garbage collection is enabled.
            pool.get_free_blocks_call_count += 1
        stream = p.stream
        block = pool.lower_bound(stream, p.size)
        if block is None or block.stream != stream:
            return False
        if block.expandable_segment is not None:
            if p.expandable_active:
                # For best fit, an expandable block counts as the size it can grow to.
                def expandable_size(b):
                    n = b.next
                    return b.size + (n.size if n is not None and not n.mapped else 0)
                nxt = pool.next_block(block)
                while (block.expandable_segment is not None and nxt is not None
                       and nxt.stream == stream and expandable_size(nxt) < expandable_size(block)):
                    block = nxt
                    nxt = pool.next_block(block)
            else:
                # Expandable segments were turned off: only non-expandable blocks qualify.
                block = pool.next_block(block)
                while (block is not None and block.stream == stream
                       and block.expandable_segment is not None):
                    block = pool.next_block(block)
                if block is None or block.stream != stream:
                    return False
        if not oversize_allows(block.size, p.size, config):
            return False
        p.block = block
        pool.erase(block)
        return True

    def should_split(self, block: Block, size: int, expandable_active: bool) -> bool:
        # If the pool is marked as not splitting a segment (MemPool(no_split=True)), do not split
        if self.no_split_pools and block.pool.mempool_id in self.no_split_pools:
            return False
        return should_split(block.pool.is_small, block.size, size, self.config, expandable_active)

    def alloc_block(self, p: AllocParams, is_retry: bool, context) -> bool:
        """Get new memory from the driver: a cudaMalloc'd segment or expandable pages."""
        size = p.alloc_size
        if is_retry:
            self.stats.num_alloc_retries += 1
        limit = self.allowed_memory_maximum
        if limit is not None and self.total_allocated_memory + size > limit:
            p.err = "cudaErrorMemoryAllocation"
            return False
        if p.expandable_active:
            p.block = self.try_allocate_expandable_block(p.device, p.stream, p.pool, p.size, context)
            p.err = None if p.block is not None else "cudaErrorMemoryAllocation"
            if p.block is not None and p.pool.owner_private_pool is not None:
                p.pool.owner_private_pool.cudaMalloc_count += 1
            return p.block is not None
        ptr = self.driver.cuda_malloc(size)
        if ptr is None:
            p.err = "cudaErrorMemoryAllocation"
            return False
        self.total_allocated_memory += size
        block = Block(p.device, p.stream, size, p.pool, ptr)
        update_stat_array(p.stat_types.segment, 1)
        update_stat_array(p.stat_types.reserved_bytes, size)
        if p.pool.owner_private_pool is not None:  # a segment for a private pool
            self.note_private_segment(p.pool, size, segments=1)
        if size >= self.config.max_split_size:
            self.stats.oversize_segments.increase(1)
        self.stats.num_device_alloc += 1
        self.record_trace(tr.SEGMENT_ALLOC, ptr, size, p.stream, context, p.pool.mempool_id)
        block.context_when_segment_allocated = context
        p.block = block
        return True

    def alloc_found_block(self, p: AllocParams, orig_size: int, context, split_remainder: bool):
        size = p.size
        pool = p.pool
        block = p.block
        selected = p.stat_types
        already_split = block.prev is not None or block.next is not None  # is_split()
        if split_remainder:
            remaining = block
            block = Block(p.device, p.stream, size, pool, remaining.ptr)
            block.expandable_segment = remaining.expandable_segment
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            pool.insert_into_blocks(remaining)
            if already_split and block.expandable_segment is None:
                # An already-split inactive block is being shrunk by size bytes.
                update_stat_array(selected.inactive_split_bytes, -block.size)
            elif block.expandable_segment is None:
                # A new split inactive block is being created from a previously unsplit block.
                update_stat_array(selected.inactive_split_bytes, remaining.size)
                update_stat_array(selected.inactive_split, 1)
        elif already_split and block.expandable_segment is None:
            # An already-split block is becoming active
            update_stat_array(selected.inactive_split_bytes, -block.size)
            update_stat_array(selected.inactive_split, -1)

        block.allocated = True
        block.requested_size = orig_size
        block.context_when_allocated = context
        self.record_trace(tr.ALLOC, block.ptr, orig_size, block.stream, context, pool.mempool_id)
        self.active_blocks[block.ptr] = block
        update_stat_array(selected.allocation_active, 1)   # allocation and active
        update_stat_array(selected.allocated_active_bytes, block.size)   # and their bytes
        update_stat_array(selected.requested_bytes, orig_size)
        if block.size >= self.config.max_split_size:
            self.stats.oversize_allocations.increase(1)
        return block

    # ------------------------------------------------------------------ free
    def free(self, block: Block, context=None) -> None:
        """Return an allocated block to the cache (nothing goes back to CUDA)."""
        if type(block) is not Block and not isinstance(block, Block):
            raise TypeError(f"free() takes a Block from malloc(), not {type(block).__name__}")
        if self.active_blocks.get(block.ptr) is not block or not block.allocated:
            raise ValueError(f"invalid device pointer: {block.ptr:#x} (double free, or a block "
                             f"of another allocator)")
        if self.record_context_ < tr.ALL:
            context = None
        block.allocated = False
        selected = block.pool.stats
        update_stat_array(selected.allocation, -1)
        update_stat_array(selected.allocated_bytes, -block.size)
        self.record_trace(tr.FREE_REQUESTED, block.ptr, block.requested_size, block.stream,
                          context if context is not None else block.context_when_allocated,
                          block.pool.mempool_id)
        if block.size >= self.config.max_split_size:
            self.stats.oversize_allocations.decrease(1)
        if block.stream_uses:
            if self.num_active_captures:  # no cudaEventRecord during a capture: defer
                self.defer_free_during_capture(block)
            else:
                self.insert_events(block)
        else:
            self.free_block(block, context)

    def free_block(self, block: Block, context) -> None:
        """Move a block into its pool of cached free blocks, merging with free neighbours."""
        self.record_trace(tr.FREE_COMPLETED, block.ptr, block.requested_size, block.stream,
                          context if context is not None else block.context_when_allocated,
                          block.pool.mempool_id)
        block.context_when_allocated = None
        original_block_size = block.size
        requested_size = block.requested_size
        pool = block.pool
        net_change_inactive_split_blocks = 0
        net_change_inactive_split_size = 0
        del self.active_blocks[block.ptr]  # before merging: a merge can move block.ptr
        for merge_candidate in (block.prev, block.next):
            if merge_candidate is None or merge_candidate.allocated:
                continue  # try_merge_blocks would refuse; the call is 2-4% of a free (bench)
            subsumed_size = self.try_merge_blocks(block, merge_candidate, pool)
            if subsumed_size > 0:
                net_change_inactive_split_blocks -= 1
                net_change_inactive_split_size -= subsumed_size
        pool.insert_into_blocks(block)
        if block.prev is not None or block.next is not None:  # is_split()
            net_change_inactive_split_blocks += 1
            net_change_inactive_split_size += block.size
        selected = pool.stats
        # inactive_split leaves expandable blocks out: their free pages can always be returned.
        if block.expandable_segment is None:
            if net_change_inactive_split_blocks:    # a change of 0 changes no figure
                update_stat_array(selected.inactive_split, net_change_inactive_split_blocks)
            if net_change_inactive_split_size:
                update_stat_array(selected.inactive_split_bytes, net_change_inactive_split_size)
        update_stat_array(selected.active, -1)
        update_stat_array(selected.active_bytes, -original_block_size)
        update_stat_array(selected.requested_bytes, -requested_size)

    def try_merge_blocks(self, dst: Block, src, pool: BlockPool) -> int:
        """Absorb free neighbour ``src`` into ``dst``; returns the bytes subsumed (0 = no merge)."""
        if (src is None or src.allocated or src.event_count > 0 or src.stream_uses
                or dst.mapped != src.mapped):
            return 0
        if src.mapped:
            pool.erase(src)
        else:
            pool.erase_unmapped(src)
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            dst.context_when_segment_allocated = src.context_when_segment_allocated
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ------------------------------------------------------------------ queries
    def memory_stats(self):
        """``torch.cuda.memory_stats()``: flat dotted keys, sorted (reserved_bytes_by_private_pools
        flattened as ``reserved_bytes_by_private_pools.0_1.all.current``)."""
        return self.stats.as_flat_dict(self.private_pool_stats.as_flat_items(STAT_TYPE_NAMES))

    def memory_stats_as_nested_dict(self) -> dict:
        nested = self.stats.as_nested_dict()
        nested["reserved_bytes_by_private_pools"] = self.private_pool_stats.as_nested_dict(
            STAT_TYPE_NAMES)
        return nested

    def reset_peak_stats(self) -> None:
        self.stats.reset_peak()
        self.private_pool_stats.reset_peak()

    def reset_accumulated_stats(self) -> None:
        self.stats.reset_accumulated()
        self.private_pool_stats.reset_accumulated()

    def check_invariants(self) -> None:
        check_invariants(self)


__all__ = ["DeviceCachingAllocator", "AllocParams", "SIZE_MAX"]
