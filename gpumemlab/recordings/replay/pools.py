"""Keeping private pools apart in a replay: a recording's segments carry ``segment_pool_id`` and
its trace entries ``pool_id`` (the MemPool or CUDA graph pool they belong to); the replay
diverts each of those allocations into a private pool of that id on the model, as
``use_mem_pool`` / a graph capture did in the recorded run.

The replay holds every pool it meets for the whole run (one reference, as the recorded
program's MemPool or graph did), so a pool's cached memory never serves the default pools and
``empty_cache`` leaves it alone, unless the recording itself freed the pool's segments (then
the recorded ``segment_free`` is replayed at its address). Recordings without ``pool_id`` in
their trace (older PyTorch) can only place the segments that existed before recording began.
"""
from __future__ import annotations

from gpumemlab.allocator.private_pool import DEFAULT_POOL_ID


def _any_stream(stream) -> bool:
    return True


class PoolRouter:
    """Runs mallocs in the private pool a recording says they belong to."""

    __slots__ = ("alloc", "held")

    def __init__(self, alloc):
        self.alloc = alloc
        self.held = set()

    def malloc(self, pool_id, size, stream, context=None):
        if pool_id is None or pool_id == DEFAULT_POOL_ID:
            return self.alloc.malloc(size, stream, context)
        pool_id = tuple(pool_id)
        alloc = self.alloc
        if pool_id not in self.held:
            alloc.create_or_incref_pool(pool_id)
            self.held.add(pool_id)
        alloc.begin_allocate_to_pool(pool_id, _any_stream)
        try:
            return alloc.malloc(size, stream, context)
        finally:
            alloc.end_allocate_to_pool(pool_id)
            alloc.release_pool(pool_id)
