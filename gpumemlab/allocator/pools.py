"""The allocator's side of private pools and CUDA graph capture (c10 ``createOrIncrefPool``,
``beginAllocateToPool``, ``endAllocateToPool``, ``releasePool``, ``getPoolUseCount``,
``setUseOnOOM``, ``setNoSplit``, ``get_pool``, ``try_mempool_fallback``, the pool-aware
``release_cached_blocks``/``emptyCache(mempool_id)``, and the capture-time deferral of frees:
``insert_events_deferred_until_no_capture``, ``remove_cudagraph_stream_uses``).

``captures_underway`` is c10's list of (pool id, filter): while it is not empty, ``get_pool``
asks each filter, newest first, whether a request on this stream (and, for ``use_mem_pool``,
this thread) goes to that pool. A graph capture also counts in ``num_active_captures``
(the newest c10's ``is_capture_context()``): only then are events not processed, frees of blocks
used on other streams deferred, and the cache not emptied on the OOM path. Plain
``use_mem_pool`` diversion does none of that (PyTorch's regression tests
test_mempool_release_cached_blocks_during_diversion and test_mempool_block_free_not_deferred).
"""
from __future__ import annotations

from .constants import K_SMALL_SIZE
from .private_pool import DEFAULT_POOL_ID, PoolError, PrivatePool, PrivatePoolStats, check_mempool_id
from .stats import SelectedStats


class PoolsMixin:
    def _init_pools(self) -> None:
        self.graph_pools = {}  # id -> PrivatePool
        self.graph_pools_freeable = {}  # id -> PrivatePool with use_count 0
        self.captures_underway = []  # [(id, filter(stream) -> bool)], oldest first
        self.num_active_captures = 0
        self.use_on_oom_pools = {}  # ids, in the order they were marked (a set in c10)
        self.no_split_pools = set()
        self.deferred_blocks = []  # freed during a capture while used on other streams
        self.block_to_cudagraph_stream_uses = {}  # block -> streams recorded during a capture
        self.private_pool_stats = PrivatePoolStats()

    def is_capture_context(self) -> bool:
        return self.num_active_captures > 0

    # ------------------------------------------------------------------ pool lifetime
    def get_private_pool(self, mempool_id) -> PrivatePool:
        pp = self.graph_pools.get(mempool_id)
        if pp is None:
            raise PoolError(f"no memory pool with id {mempool_id} on device {self.device} "
                            f"(never created, or already released and emptied)")
        return pp

    def create_or_incref_pool(self, mempool_id) -> None:
        """c10 ``createOrIncrefPool``: a new pool with use_count 1, or one more user."""
        mempool_id = check_mempool_id(mempool_id)
        if mempool_id == DEFAULT_POOL_ID:
            raise PoolError("(0, 0) is the default pool, not a private pool id")
        pp = self.graph_pools.get(mempool_id)
        if pp is None:
            pp = self.graph_pools[mempool_id] = PrivatePool(mempool_id)
            for pool in pp.block_pools():
                pool.stats = SelectedStats(self.stats, pool.stat_types)
            return
        if pp.use_count <= 0:
            # c10 asserts here (use_count > 0): nobody may join a pool that was released.
            raise PoolError(f"memory pool {mempool_id} was released (its last user went); "
                            f"it cannot be used again")
        pp.use_count += 1

    def begin_allocate_to_pool(self, mempool_id, filter_fn) -> None:
        """c10 ``beginAllocateToPool``: requests that ``filter_fn(stream)`` accepts go to the pool.

        c10 increments the pool's use_count before it refuses a pool already being recorded
        to; here the refusal comes first so that a refused call changes nothing."""
        mempool_id = check_mempool_id(mempool_id)
        for pid, _ in self.captures_underway:
            if pid == mempool_id:
                raise PoolError(f"beginAllocateToPool: already recording to mempool_id "
                                f"{mempool_id}")
        self.create_or_incref_pool(mempool_id)
        self.captures_underway.append((mempool_id, filter_fn))

    def end_allocate_to_pool(self, mempool_id) -> None:
        """c10 ``endAllocateToPool``: stop diverting to the pool (use_count is kept)."""
        for i, (pid, _) in enumerate(self.captures_underway):
            if pid == mempool_id:
                del self.captures_underway[i]
                return
        raise PoolError(f"endAllocatePool: not currently recording to mempool_id {mempool_id}")

    def release_pool(self, mempool_id) -> None:
        """c10 ``releasePool``: one user fewer; at 0 the pool becomes freeable."""
        pp = self.get_private_pool(mempool_id)
        if pp.use_count <= 0:
            raise PoolError(f"memory pool {mempool_id} was already released")
        pp.use_count -= 1
        if pp.use_count == 0:
            self.graph_pools_freeable[mempool_id] = pp

    def get_pool_use_count(self, mempool_id) -> int:
        return self.get_private_pool(mempool_id).use_count

    def set_use_on_oom(self, mempool_id, use_on_oom: bool) -> None:
        if use_on_oom:
            self.use_on_oom_pools[mempool_id] = None
        else:
            self.use_on_oom_pools.pop(mempool_id, None)

    def set_no_split(self, mempool_id) -> None:
        self.no_split_pools.add(mempool_id)

    def notify_capture_begin(self) -> None:
        """A CUDA graph capture starts (the newest c10 counts them: ``is_capture_context``)."""
        self.num_active_captures += 1

    def notify_capture_end(self, context=None) -> None:
        self.num_active_captures -= 1

    # ------------------------------------------------------------------ routing
    def get_pool(self, size: int, stream: int):
        """c10 ``get_pool``: the newest diversion whose filter accepts the stream, else default."""
        if self.captures_underway:
            for pid, filter_fn in reversed(self.captures_underway):
                if filter_fn(stream):
                    pp = self.graph_pools[pid]
                    return pp.small_blocks if size <= K_SMALL_SIZE else pp.large_blocks
        return self.small_blocks if size <= K_SMALL_SIZE else self.large_blocks

    def try_mempool_fallback(self, p) -> bool:
        """c10 ``try_mempool_fallback``: a request outside any private pool that cudaMalloc could
        not serve may take a cached free block of a ``use_on_oom`` pool (search only, never
        allocate). c10 enters and leaves each pool with begin/end/releasePool; the net effect
        on the pool is nil, so the model searches the pool's BlockPool directly."""
        if p.pool.owner_private_pool is not None or not self.use_on_oom_pools:
            return False
        for pid in self.use_on_oom_pools:
            pp = self.graph_pools.get(pid)
            if pp is None:
                continue
            original = p.pool
            p.pool = pp.small_blocks if p.size <= K_SMALL_SIZE else pp.large_blocks
            p.stat_types = p.pool.stats
            p.expandable_active = False  # c10 builds the fallback's AllocParams with false
            if self.get_free_block(p):
                p.err = None
                return True
            p.pool = original
            p.stat_types = original.stats
            p.expandable_active = self.config.expandable_segments
        return False

    # ------------------------------------------------------------------ releasing
    def release_cached_blocks(self, context, mempool_id=DEFAULT_POOL_ID) -> bool:
        """c10 ``release_cached_blocks(context, mempool_id)``.

        The default id, outside a graph capture: wait for all events, then give back the default
        pools' whole free segments. Then every freeable private pool (for a private id: only
        that one, after its own events) gives back its whole free segments, and a freeable pool
        that holds no segment any more is forgotten."""
        if mempool_id == DEFAULT_POOL_ID and not self.is_capture_context():
            self.synchronize_and_free_events(context)
            self.release_blocks(self.large_blocks, context)
            self.release_blocks(self.small_blocks, context)
        for pid, pp in list(self.graph_pools_freeable.items()):
            if mempool_id != DEFAULT_POOL_ID:
                if pid != mempool_id:
                    continue
                self._synchronize_pool_events(context, pp)
            self.release_blocks(pp.small_blocks, context)
            self.release_blocks(pp.large_blocks, context)
            if self.pool_reserved(pp) == 0:  # c10: cudaMalloc_count == 0 (same for cudaMalloc)
                del self.graph_pools[pid]
                del self.graph_pools_freeable[pid]
        return True

    def empty_cache(self, context=None, mempool_id=DEFAULT_POOL_ID) -> None:
        """c10 ``emptyCache(mempool_id)`` (``torch.cuda.empty_cache`` passes the default id)."""
        from . import trace as tr
        self.release_cached_blocks(self._gather(tr.ALL, context), check_mempool_id(mempool_id))

    def _synchronize_pool_events(self, context, pp) -> None:
        """``synchronize_and_free_events(context, pool)``: only the events of ``pp``'s blocks."""
        self.stats.num_sync_all_streams += 1
        self.insert_events_deferred_until_no_capture(context)
        for stream, blocks in list(self.cuda_events.items()):
            keep = []
            for block in blocks:
                if block.pool.owner_private_pool is not pp:
                    keep.append(block)
                    continue
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, context)
            if keep:
                self.cuda_events[stream] = keep
            else:
                del self.cuda_events[stream]

    # ------------------------------------------------------------------ frees during capture
    def defer_free_during_capture(self, block) -> None:
        """A block used on other streams freed during a capture: its end-of-life events cannot
        be recorded now (cudaEventQuery is illegal while capturing), so it waits for the end."""
        self.deferred_blocks.append(block)

    def insert_events_deferred_until_no_capture(self, context) -> None:
        """c10: once no capture is underway, the deferred blocks get their events; streams
        recorded during the capture need none (the graph orders them), so a block used only on
        those is freed at once."""
        if not self.deferred_blocks:
            return
        blocks, self.deferred_blocks = self.deferred_blocks, []
        for block in blocks:
            captured = self.block_to_cudagraph_stream_uses.pop(block, None)
            if captured and block.stream_uses:
                kept = {s: None for s in block.stream_uses if s not in captured}
                block.stream_uses = kept or None
            if block.stream_uses:
                self.insert_events(block)
            if block.event_count == 0:
                self.free_block(block, context)

    def note_stream_use_during_capture(self, block, stream) -> None:
        self.block_to_cudagraph_stream_uses.setdefault(block, set()).add(stream)

    # ------------------------------------------------------------------ accounting
    def note_private_segment(self, pool, reserved: int, segments: int) -> None:
        """A private pool's segment (or mapped pages) came or went: its ``cudaMalloc_count``
        and its ``reserved_bytes_by_private_pools`` entry. c10 counts one cudaMalloc per
        ``alloc_block`` (expandable pages included) and one fewer per ``release_block`` or
        ``unmap_block``; for expandable segments those need not balance, so the count is
        kept at 0 or more and a pool is forgotten when it reserves nothing (see
        release_cached_blocks)."""
        pp = pool.owner_private_pool
        pp.cudaMalloc_count = max(0, pp.cudaMalloc_count + segments)
        if reserved:
            self.private_pool_stats.change(pp.id, pool.stat_types, reserved)

    def pool_reserved(self, pp) -> int:
        stats = self.private_pool_stats.by_id.get(pp.id)
        return stats[0].current if stats is not None else 0

    # ------------------------------------------------------------------ queries
    def allocated_in_private_pools(self) -> int:
        """The OOM message's "allocated in private pools": c10 sums the *free cached* blocks of
        every private pool (its variable name says allocated)."""
        return sum(b.size for pp in self.graph_pools.values() for pool in pp.block_pools()
                   for b in pool.blocks())

    def private_pool_head_blocks(self, pp) -> list:
        """c10 ``get_private_pool_head_blocks``: first blocks of the pool's segments."""
        mine = (pp.small_blocks, pp.large_blocks)
        heads = [b for b in self.active_blocks.values() if b.pool in mine and b.prev is None]
        for pool in mine:
            heads.extend(b for b in pool.blocks() if b.prev is None)
        return heads

    def all_block_pools(self) -> list:
        """The default pools and every private pool's, default first."""
        pools = [self.small_blocks, self.large_blocks]
        for pp in self.graph_pools.values():
            pools.extend(pp.block_pools())
        return pools
