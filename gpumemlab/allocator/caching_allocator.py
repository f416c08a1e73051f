"""``DeviceCachingAllocator``: PyTorch's CUDA caching allocator for one device, in Python.

Follows c10/cuda/CUDACachingAllocator.cpp function by function, with c10's names:
``malloc`` (the fallback chain), ``get_free_block``, ``should_split``, ``alloc_block``,
``alloc_found_block``, ``free``, ``free_block`` and ``try_merge_blocks``. Streams and events
(``record_stream``) are in ``events.py``; releasing memory (``release_cached_blocks`` and friends)
in ``release.py``; expandable segments in ``expandable_blocks.py``; snapshots in ``snapshot.py``.

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
from .constants import K_MIN_BLOCK_SIZE, K_SMALL_SIZE, ONE_EXA_BYTES, SIZE_MAX
from .sizes import format_size
from .driver import CudaDriver
from .events import EventsMixin, _check_stream
from .expandable_blocks import ExpandableOpsMixin
from .oom import EXA_MESSAGE, OutOfMemoryError, oom_message
from .release import ReleaseMixin
from .runtime_settings import SettingsMixin
from .rounding import get_allocation_size, round_size
from .snapshot import SnapshotMixin
from .stats import DeviceStats, max_split_size_stat, stat_types_for


class AllocParams:
    """c10 ``AllocParams``: one request on its way through ``malloc``."""

    __slots__ = ("device", "stream", "size", "pool", "alloc_size", "block", "err", "stat_types")

    def __init__(self, device, size, stream, pool, alloc_size):
        self.device = device
        self.stream = stream
        self.size = size  # rounded request
        self.pool = pool
        self.alloc_size = alloc_size  # segment size if a new one is needed
        self.block = None
        self.err = None
        self.stat_types = pool.stat_types  # get_stat_types_for_pool


def _check_size(value, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of bytes, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")


class DeviceCachingAllocator(SettingsMixin, EventsMixin, ReleaseMixin, ExpandableOpsMixin,
                             SnapshotMixin):
    """The caching allocator of one (simulated) device."""

    def __init__(self, total_memory: int, config: AllocatorConfig | None = None, device: int = 0,
                 record_history: bool = True, max_entries: int = sys.maxsize,
                 record_context: str | None = "all", other_memory: int = 0):
        _check_size(total_memory, "total_memory")
        _check_size(other_memory, "other_memory")
        if other_memory >= total_memory:
            raise ValueError("other_memory (held outside the allocator) must be less than total_memory")
        self.device = device
        self.driver = CudaDriver(total_memory, other_memory)
        self.config = config if config is not None else AllocatorConfig()
        self.stats = DeviceStats()
        self.stats.max_split_size = max_split_size_stat(self.config.max_split_size)
        self._stat_groups = {is_small: self._make_stat_groups(is_small) for is_small in (False, True)}
        self.large_blocks = BlockPool(is_small=False)
        self.small_blocks = BlockPool(is_small=True)
        self.active_blocks = {}  # ptr -> Block, allocated or pending free
        self.cuda_events = {}  # stream -> list of blocks with an outstanding event there
        self.total_allocated_memory = 0  # reserved bytes, as c10 names it
        self.allowed_memory_maximum = None  # no limit (newest c10: std::optional)
        self.expandable_segments_ = []
        self.alloc_buffer = tr.TraceRingBuffer(max_entries)
        self.record_history = False
        self.record_context_ = tr.NEVER
        self.clock = 0
        self.user_metadata = ""  # c10: the thread-local metadata set by _set_memory_metadata
        self.skip_actions = frozenset()  # actions _record_memory_history(skip_actions=...) drops
        self.oversize_stats_exact = True
        self.record_history_settings(record_history, context=record_context, max_entries=max_entries)
        # The per_process_memory_fraction setting is read once, when the allocator is built.
        self.set_memory_fraction(self.config.per_process_memory_fraction)

    def _make_stat_groups(self, is_small: bool) -> tuple:
        """The (aggregate, pool) Stat pairs the hot paths update, looked up once."""
        st = self.stats
        t = 1 if is_small else 2  # SMALL_POOL / LARGE_POOL

        def pair(*names):
            return tuple(getattr(st, n)[i] for n in names for i in (0, t))

        return (pair("allocation", "active"), pair("allocated_bytes", "active_bytes"),
                pair("requested_bytes"), pair("allocation"), pair("allocated_bytes"),
                pair("active"), pair("active_bytes"), pair("requested_bytes"))

    # ------------------------------------------------------------------ tracing
    def _gather(self, level: int, context):
        """``maybeGatherContext``: keep the caller's frames only at this recording level."""
        return context if self.record_context_ >= level else None

    def record_trace(self, action, addr, size, stream, context) -> None:
        if not self.record_history:
            return
        if self.skip_actions and action in self.skip_actions:
            return
        self.clock += 1
        frames = context if self.record_context_ >= tr.ALLOC_CONTEXT else None
        entry = (action, addr, size, stream, self.clock, frames, self.user_metadata)
        # TraceRingBuffer.insert, inlined: this is the hot path.
        buf = self.alloc_buffer
        entries = buf.entries
        if len(entries) < buf.max_entries:
            entries.append(entry)
        else:  # full: overwrite the oldest entry
            nxt = buf.next
            entries[nxt] = entry
            nxt += 1
            buf.next = 0 if nxt == buf.max_entries else nxt

    # ------------------------------------------------------------------ malloc
    def get_pool(self, size: int, stream: int) -> BlockPool:
        return self.small_blocks if size <= K_SMALL_SIZE else self.large_blocks

    def malloc(self, orig_size: int, stream: int = 0, context=None) -> Block:
        """Allocate ``orig_size`` bytes on ``stream``; raises :class:`OutOfMemoryError`."""
        if type(orig_size) is not int:  # noqa: E721  (fast path; bools and floats are rejected)
            _check_size(orig_size, "size")
        elif orig_size < 0:
            _check_size(orig_size, "size")
        if type(stream) is not int or stream < 0:  # noqa: E721
            _check_stream(stream)
        if orig_size >= ONE_EXA_BYTES:
            raise OutOfMemoryError(EXA_MESSAGE, requested_size=orig_size, device=self.device)
        if self.record_context_ < tr.STATE:
            context = None
        if self.cuda_events:
            self.process_events(context)
        config = self.config
        if config.any_roundup:
            size = round_size(orig_size, config)
        else:  # round_size without roundup_power2_divisions, inlined
            size = 512 if orig_size < 512 else (orig_size + 511) // 512 * 512
        pool = self.small_blocks if size <= K_SMALL_SIZE else self.large_blocks
        alloc_size = get_allocation_size(size, config.large_segment_size)
        p = AllocParams(self.device, size, stream, pool, alloc_size)

        # First, try to get a block from the existing pool (callbacks: none registered here).
        block_found = self.get_free_block(p)
        if not block_found:
            # Do garbage collection if the flag is set.
            if self._gc_enabled():
                self.garbage_collect_cached_blocks(context)
            block_found = (
                # Attempt allocate
                self.alloc_block(p, False, context)
                # Free enough available cached blocks to satisfy alloc and retry alloc.
                or (self.release_available_cached_blocks(p, context)
                    and self.alloc_block(p, False, context))
                # Free all non-split cached blocks and retry alloc.
                or (self.release_cached_blocks(context) and self.alloc_block(p, True, context)))
        if not block_found:
            self._raise_oom(p, orig_size, context)
        split_remainder = self.should_split(p.block, p.size)
        return self.alloc_found_block(p, orig_size, context, split_remainder)

    def _raise_oom(self, p: AllocParams, orig_size: int, context):
        device_free, device_total = self.driver.mem_get_info()
        allowed_info = ""
        if self.set_fraction:
            allowed_info = format_size(self.allowed_memory_maximum) + " allowed; "
        self.record_trace(tr.OOM, device_free, p.size, p.stream, context)
        self.stats.num_ooms += 1
        allocated_bytes = self.stats.allocated_bytes[0].current
        reserved_bytes = self.stats.reserved_bytes[0].current
        message = oom_message(alloc_size=p.alloc_size, device=self.device, device_total=device_total,
                              device_free=device_free, allowed_info=allowed_info, proc_info="",
                              allocated_bytes=allocated_bytes, reserved_bytes=reserved_bytes)
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
        keys = pool.keys
        stream = p.stream
        i = pool.lower_bound(stream, p.size)
        if i == len(keys) or keys[i][0] != stream:
            return False
        block = pool.block_at(i)
        if block.expandable_segment is not None:
            if config.expandable_segments:
                # For best fit, an expandable block counts as the size it can grow to.
                def expandable_size(b):
                    n = b.next
                    return b.size + (n.size if n is not None and not n.mapped else 0)
                j = i + 1
                while (block.expandable_segment is not None and j < len(keys)
                       and keys[j][0] == stream
                       and expandable_size(pool.block_at(j)) < expandable_size(block)):
                    i = j
                    block = pool.block_at(i)
                    j += 1
            else:
                # Expandable segments were turned off: only non-expandable blocks qualify.
                i += 1
                while (i < len(keys) and keys[i][0] == stream
                       and pool.block_at(i).expandable_segment is not None):
                    i += 1
                if i == len(keys) or keys[i][0] != stream:
                    return False
                block = pool.block_at(i)
        max_split_size = config.max_split_size
        # Do not return an oversized block for a large request
        if p.size < max_split_size and block.size >= max_split_size:
            return False
        # Allow oversized block size to be rounded up but within a limit
        if p.size >= max_split_size and block.size >= p.size + config.max_non_split_rounding_size:
            return False
        p.block = block
        del keys[i]
        del pool.by_ptr[block.ptr]
        return True

    def should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.is_small or self.config.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.config.max_split_size and remaining > K_SMALL_SIZE

    def alloc_block(self, p: AllocParams, is_retry: bool, context) -> bool:
        """Get new memory from the driver: a cudaMalloc'd segment or expandable pages."""
        size = p.alloc_size
        if is_retry:
            self.stats.num_alloc_retries += 1
        limit = self.allowed_memory_maximum
        if limit is not None and self.total_allocated_memory + size > limit:
            p.err = "cudaErrorMemoryAllocation"
            return False
        if self.config.expandable_segments:
            p.block = self.try_allocate_expandable_block(p.device, p.stream, p.pool, p.size, context)
            p.err = None if p.block is not None else "cudaErrorMemoryAllocation"
            return p.block is not None
        ptr = self.driver.cuda_malloc(size)
        if ptr is None:
            p.err = "cudaErrorMemoryAllocation"
            return False
        self.total_allocated_memory += size
        block = Block(p.device, p.stream, size, p.pool, ptr)
        stats = self.stats
        for t in p.stat_types:
            stats.segment[t].increase(1)
            stats.reserved_bytes[t].increase(size)
        if size >= self.config.max_split_size:
            stats.oversize_segments.increase(1)
        stats.num_device_alloc += 1
        self.record_trace(tr.SEGMENT_ALLOC, ptr, size, p.stream, context)
        block.context_when_segment_allocated = context
        p.block = block
        return True

    def alloc_found_block(self, p: AllocParams, orig_size: int, context, split_remainder: bool):
        size = p.size
        pool = p.pool
        block = p.block
        stats = self.stats
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
                for t in p.stat_types:
                    stats.inactive_split_bytes[t].decrease(block.size)
            elif block.expandable_segment is None:
                # A new split inactive block is being created from a previously unsplit block.
                for t in p.stat_types:
                    stats.inactive_split_bytes[t].increase(remaining.size)
                    stats.inactive_split[t].increase(1)
        elif already_split and block.expandable_segment is None:
            # An already-split block is becoming active
            for t in p.stat_types:
                stats.inactive_split_bytes[t].decrease(block.size)
                stats.inactive_split[t].decrease(1)

        block.allocated = True
        block.requested_size = orig_size
        block.context_when_allocated = context
        self.record_trace(tr.ALLOC, block.ptr, orig_size, block.stream, context)
        self.active_blocks[block.ptr] = block
        # increase_stat on allocation, allocated_bytes, active, active_bytes, requested_bytes
        # for the aggregate and the pool's type, inlined because this is the hot path.
        groups = self._stat_groups[pool.is_small]
        for st, amount in ((groups[0], 1), (groups[1], block.size), (groups[2], orig_size)):
            for stat in st:
                c = stat.current + amount
                stat.current = c
                stat.allocated += amount
                if c > stat.peak:
                    stat.peak = c
        if block.size >= self.config.max_split_size:
            stats.oversize_allocations.increase(1)
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
        stats = self.stats
        groups = self._stat_groups[block.pool.is_small]
        size = block.size
        for stat in groups[3]:  # allocation
            stat.current -= 1
            stat.freed += 1
        for stat in groups[4]:  # allocated_bytes
            stat.current -= size
            stat.freed += size
        self.record_trace(tr.FREE_REQUESTED, block.ptr, block.requested_size, block.stream,
                          context if context is not None else block.context_when_allocated)
        if block.size >= self.config.max_split_size:
            stats.oversize_allocations.decrease(1)
        if block.stream_uses:
            self.insert_events(block)
        else:
            self.free_block(block, context)

    def free_block(self, block: Block, context) -> None:
        """Move a block into its pool of cached free blocks, merging with free neighbours."""
        self.record_trace(tr.FREE_COMPLETED, block.ptr, block.requested_size, block.stream,
                          context if context is not None else block.context_when_allocated)
        block.context_when_allocated = None
        original_block_size = block.size
        requested_size = block.requested_size
        pool = block.pool
        net_blocks = 0
        net_bytes = 0
        del self.active_blocks[block.ptr]
        for candidate in (block.prev, block.next):
            if candidate is None or candidate.allocated:
                continue  # try_merge_blocks would refuse: skip the call on the hot path
            subsumed = self.try_merge_blocks(block, candidate, pool)
            if subsumed > 0:
                net_blocks -= 1
                net_bytes -= subsumed
        pool.insert_into_blocks(block)
        if block.prev is not None or block.next is not None:  # is_split()
            net_blocks += 1
            net_bytes += block.size
        stats = self.stats
        # Expandable blocks are left out of inactive_split: their free pages can always be
        # returned.
        if block.expandable_segment is None and (net_blocks or net_bytes):
            for t in stat_types_for(pool):
                if net_blocks > 0:
                    stats.inactive_split[t].increase(net_blocks)
                elif net_blocks < 0:
                    stats.inactive_split[t].decrease(-net_blocks)
                if net_bytes > 0:
                    stats.inactive_split_bytes[t].increase(net_bytes)
                elif net_bytes < 0:
                    stats.inactive_split_bytes[t].decrease(-net_bytes)
        groups = self._stat_groups[pool.is_small]
        for st, amount in ((groups[5], 1), (groups[6], original_block_size),
                           (groups[7], requested_size)):
            for stat in st:
                stat.current -= amount
                stat.freed += amount

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
        """``torch.cuda.memory_stats()``: flat dotted keys, sorted."""
        return self.stats.as_flat_dict()

    def reset_peak_stats(self) -> None:
        self.stats.reset_peak()

    def reset_accumulated_stats(self) -> None:
        self.stats.reset_accumulated()

    def cache_info(self) -> int:
        """c10 ``cacheInfo``: the largest cached free block (0 if none)."""
        largest = 0
        for pool in (self.large_blocks, self.small_blocks):
            for key in pool.keys:
                largest = max(largest, key[1])
        return largest

    def check_invariants(self) -> None:
        from .invariants import check_invariants
        check_invariants(self)


__all__ = ["DeviceCachingAllocator", "AllocParams", "SIZE_MAX"]
