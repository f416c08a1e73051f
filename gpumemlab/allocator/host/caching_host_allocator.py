"""``CachingHostAllocator``: PyTorch's pinned host allocator (``at::CachingHostAllocatorImpl``
with CUDA's ``CUDACachingHostAllocatorImpl``), rule for rule, default pool only.

* ``allocate(size)``: process events (also with ``pinned_use_background_threads``, whose thread
  would have processed them meanwhile: a deterministic model has no "meanwhile"), round the size
  (rounding.host_round_size), pop the back of that size's free list, else pin a new block, first
  from the reserve segment (``pinned_reserve_segment_size_mb``; created by the first pin), else
  ``cudaHostAlloc`` or, with ``pinned_use_cuda_host_register``, malloc + pre-faulting pages on
  ``pinned_num_register_threads`` threads + ``cudaHostRegister``.
* ``record_event(block, stream)``: the block was used on ``stream`` (a non-blocking copy).
* ``free(block)``: with no streams recorded the block is cached at once (``maybe_cache_block``:
  freed outright when bigger than ``pinned_max_cached_size``); otherwise one event per stream is
  queued at the front and the block waits until ``process_events`` has seen them all complete.
* ``process_events``: from the back of the queue (the oldest event) until the first event that
  is not ready, as c10 does: one busy stream holds back every later event, whatever its stream.
* ``empty_cache()``: process events, then free every cached block (blocks in use and blocks
  still waiting for events stay).

Private pools (graph capture) are not modelled. Events: a stream with simulated work queued
(``is_busy(stream)`` true) answers "not ready", as ``cudaEventQuery`` does.
"""
from __future__ import annotations

from collections import deque

from ..config import AllocatorConfig
from ..constants import K_MB
from .block import HostBlock, HostMemory, HostOutOfMemory, PinnedReserveSegment
from .constants import MAX_SIZE_INDEX, PAGE_SIZE
from .oom import HostOutOfMemoryError
from .rounding import host_round_size, size_index
from .stats import HostStats, HostStatsStaged, flatten


class CachingHostAllocator:
    """The pinned host allocator. ``config`` is the process's AllocatorConfig (the same
    PYTORCH_ALLOC_CONF as the device's); ``host_memory`` the host's pinnable bytes (None: no
    limit); ``is_busy(stream)`` says whether a stream still has work queued; ``clock()`` gives
    the trace's time_us; ``alloc_time_us(nbytes, use_register)`` is the modelled duration of one
    pin (0 by default: host_alloc_time counts calls, PyTorch's times are wall-clock)."""

    def __init__(self, config: AllocatorConfig | None = None, host_memory=None, *,
                 is_busy=None, clock=None, alloc_time_us=None, free_time_us=None,
                 max_entries: int = 100_000):
        self.config = config if config is not None else AllocatorConfig()
        self.memory = HostMemory(host_memory)
        self.is_busy = is_busy or (lambda stream: False)
        self._ticks = 0
        self.clock = clock or self._tick
        self.alloc_time_us = alloc_time_us or (lambda nbytes, use_register: 0)
        self.free_time_us = free_time_us or (lambda nbytes, use_register: 0)
        self.blocks: dict = {}  # ptr -> HostBlock: blocks_ and ptr_to_block_
        self.free_list = [deque() for _ in range(MAX_SIZE_INDEX)]
        self.events: deque = deque()  # (stream, block); front = newest, back = oldest
        self.stats = HostStatsStaged()
        self.reserve: PinnedReserveSegment | None = None  # created by the first pin (static)
        self.traces: list = []
        self.max_entries = max_entries
        self.record_history = False

    def _tick(self) -> int:
        self._ticks += 1
        return self._ticks

    def _trace(self, action, block_or_ptr, size, stream=0, frames=None, requested=None) -> None:
        if not self.record_history:
            return
        addr = block_or_ptr.ptr if isinstance(block_or_ptr, HostBlock) else block_or_ptr
        entry = {"action": action, "addr": addr, "size": size, "stream": stream,
                 "time_us": self.clock(), "frames": list(frames or [])}
        if requested is not None:   # the kit's own key: the request behind a rounded block
            entry["requested_size"] = requested
        self.traces.append(entry)
        if len(self.traces) > self.max_entries:
            del self.traces[0]

    # ------------------------------------------------------------------ allocate
    def allocate(self, size: int, frames=None) -> HostBlock | None:
        """``CachingHostAllocatorImpl::allocate``; returns None for size 0, as c10 does."""
        if size == 0:
            return None
        self.process_events()
        round_size = host_round_size(size, self.config.pinned_max_round_threshold,
                                     self.config.pinned_max_cached_size)
        block = self._get_free_block(round_size)
        if block is None:
            ptr, use_register, from_reserve = self._allocate_host_memory(round_size, size)
            block = HostBlock(round_size, ptr)
            block.use_register, block.from_reserve = use_register, from_reserve
            block.allocated = True
            self._add_allocated_block(block)
            if not from_reserve:  # a carve from the reserve calls no CUDA API
                self._trace("segment_alloc", block, block.size, frames=frames)
        block.requested_size = size
        block.frames = frames
        self._trace("alloc", block, block.size, frames=frames, requested=size)
        return block

    def _get_free_block(self, size: int):
        # c10 pops the list's back without comparing sizes: above the round threshold a block
        # of any size in the same power-of-two bucket is handed out (and counted as ``size``).
        index = size_index(size)
        if not self.free_list[index]:
            return None
        block = self.free_list[index].pop()
        block.allocated = True
        self.stats.active_bucket_stats[index].increase(1)
        self.stats.active_bytes_bucket_stats[index].increase(size)
        return block

    def _allocate_host_memory(self, size: int, requested: int):
        reserve = self._reserve_segment(requested)
        if reserve.initialized:
            ptr = reserve.allocate(size)
            if ptr is not None:
                return ptr, False, True
        ptr, use_register = self._slowpath(size, requested)
        return ptr, use_register, False

    def _reserve_segment(self, requested: int) -> PinnedReserveSegment:
        # get_reserve_segment(): a function-local static, made by the first pin of the process.
        if self.reserve is None:
            mb = self.config.pinned_reserve_segment_size_mb
            if mb > 0:
                ptr, _ = self._slowpath(mb * K_MB, requested)
                self.reserve = PinnedReserveSegment(ptr, mb * K_MB)
                self._trace("segment_alloc", ptr, mb * K_MB)
            else:
                self.reserve = PinnedReserveSegment()
        return self.reserve

    def _slowpath(self, size: int, requested: int):
        """``allocate_host_memory_slowpath``: cudaHostAlloc, or malloc + cudaHostRegister."""
        use_register = self.config.pinned_use_cuda_host_register
        try:
            ptr = self.memory.pin(size)
        except HostOutOfMemory:
            raise HostOutOfMemoryError(requested, size, self.config, self.memory,
                                       self.cached_bytes(), use_register) from None
        self.stats.host_alloc_time.increase(self.alloc_time_us(size, use_register))
        return ptr, use_register

    def register_threads(self, size: int) -> int:
        """Threads ``allocWithCudaHostRegister`` pre-faults a block's pages on: the setting when
        it is > 1 and the block has at least a page per thread, else 1."""
        n = self.config.pinned_num_register_threads
        return n if n > 1 and size >= PAGE_SIZE * n else 1

    def _add_allocated_block(self, block: HostBlock) -> None:
        self.blocks[block.ptr] = block
        s, index = self.stats, size_index(block.size)
        s.allocations.increase(1)
        s.allocated_bytes.increase(block.size)
        s.allocation_bucket_stats[index].increase(1)
        s.allocated_bytes_bucket_stats[index].increase(block.size)
        s.active_bucket_stats[index].increase(1)
        s.active_bytes_bucket_stats[index].increase(block.size)

    # ------------------------------------------------------------------ free and events
    def record_event(self, block: HostBlock, stream: int) -> bool:
        """``record_event``: False when the block is not this allocator's (c10 checks)."""
        if block is None or self.blocks.get(block.ptr) is not block:
            return False
        if not block.allocated:
            raise ValueError("record_event on a pinned block that is not allocated")
        block.streams[stream] = None
        return True

    def free(self, block: HostBlock, frames=None) -> None:
        """``free``: cache the block now, or queue one event per stream it was used on."""
        if block is None:
            return
        block.allocated = False
        streams, block.streams = list(block.streams), {}
        self._trace("free_requested", block, block.size, frames=frames)
        if not streams:
            self._maybe_cache_block(block)
            return
        block.event_count += len(streams)
        for stream in streams:
            self.events.appendleft((stream, block))

    def process_events(self) -> None:
        """``process_events_for_specific_size(-1)``: oldest first, stop at the first not ready."""
        while self.events:
            stream, block = self.events.pop()
            if self.is_busy(stream):
                self.events.append((stream, block))
                return
            block.event_count -= 1
            if block.event_count == 0:
                self._maybe_cache_block(block)

    def _maybe_cache_block(self, block: HostBlock) -> None:
        index = size_index(block.size)
        if block.size > self.config.pinned_max_cached_size:
            self._destroy_block(block, is_active=True)
            return
        self.free_list[index].append(block)
        self.stats.active_bucket_stats[index].decrease(1)
        self.stats.active_bytes_bucket_stats[index].decrease(block.size)
        self._trace("free_completed", block, block.size)

    def _destroy_block(self, block: HostBlock, is_active: bool) -> None:
        size, index, s = block.size, size_index(block.size), self.stats
        del self.blocks[block.ptr]
        if not (self.reserve is not None and self.reserve.initialized
                and self.reserve.owns(block.ptr)):
            # free_block_slowpath: cudaFreeHost, or cudaHostUnregister + free. Reserve blocks
            # are never given back (free_block returns early), though their stats go.
            self.memory.unpin(size)
            s.host_free_time.increase(self.free_time_us(size, block.use_register))
        s.allocations.decrease(1)
        s.allocated_bytes.decrease(size)
        s.allocation_bucket_stats[index].decrease(1)
        s.allocated_bytes_bucket_stats[index].decrease(size)
        if is_active:
            s.active_bucket_stats[index].decrease(1)
            s.active_bytes_bucket_stats[index].decrease(size)
            self._trace("free_completed", block, size)
        if not block.from_reserve:
            self._trace("segment_free", block, size)

    def empty_cache(self) -> None:
        """``empty_cache``: process events, then free every cached block, bucket by bucket."""
        self.process_events()
        for bucket in self.free_list:
            while bucket:
                self._destroy_block(bucket.popleft(), is_active=False)

    def release_cached_block(self, ptr: int) -> bool:
        """Give back the one cached block at ``ptr``, as ``empty_cache`` gives back each
        (replay: a recorded ``segment_free`` names its block). False when no cached block is
        there (in use, waiting for an event, or never pinned)."""
        block = self.blocks.get(ptr)
        if block is None or block.allocated or block.event_count:
            return False
        bucket = self.free_list[size_index(block.size)]
        try:
            bucket.remove(block)
        except ValueError:
            return False
        self._destroy_block(block, is_active=False)
        return True

    # ------------------------------------------------------------------ reading
    def get_stats(self) -> HostStats:
        return HostStats(self.stats)

    def host_memory_stats(self):
        """``torch.cuda.memory.host_memory_stats()``: flat, sorted keys."""
        return flatten(self.get_stats().as_nested_dict())

    def host_memory_stats_as_nested_dict(self) -> dict:
        return self.get_stats().as_nested_dict()

    def reset_accumulated_stats(self) -> None:
        self.stats.reset_accumulated()

    def reset_peak_stats(self) -> None:
        self.stats.reset_peak()

    def cached_bytes(self) -> int:
        """Bytes of blocks sitting in the free lists (pinned, not in use)."""
        return sum(b.size for bucket in self.free_list for b in bucket)

    def pending_blocks(self) -> list:
        """Blocks freed but still waiting for an event, oldest event first."""
        seen = {}
        for _, block in reversed(self.events):
            seen[id(block)] = block
        return list(seen.values())
