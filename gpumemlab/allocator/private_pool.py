"""Private memory pools: c10's ``PrivatePool``, ``MempoolId_t`` and ``BlockPool::owner_MempoolId``.

A private pool is a pair of ``BlockPool`` (small, large) of its own, keyed by a ``MempoolId_t``:
a tuple of two ints. ``(0, 0)`` is the default pool; a pool made by the user
(``torch.cuda.MemPool()`` or ``torch.cuda.graph_pool_handle()``) is ``(0, n)``; a pool a CUDA graph
makes for itself at ``capture_begin`` is ``(n, 0)`` (c10 ``generate_mempool_id``: two counters,
both starting at 1). ``use_count`` counts the users (MemPool objects, ``use_mem_pool`` contexts,
graphs); ``cudaMalloc_count`` the segments it still holds. A pool whose ``use_count`` reaches 0
becomes *freeable*: the next ``empty_cache`` gives back its whole free segments, and once it holds
no segment it is forgotten.

Also ``reserved_bytes_by_private_pools``, the newest ``memory_stats`` entry: per pool id, the
``reserved_bytes`` Stat array scoped to that pool.
"""
from __future__ import annotations

from .block import BlockPool
from .stats import Stat

DEFAULT_POOL_ID = (0, 0)


class PoolError(ValueError):
    """A private-pool request c10 would refuse (TORCH_CHECK) or assert on."""


class PrivatePool:
    """c10 ``PrivatePool``: one pool id's own small and large free-block sets."""

    __slots__ = ("id", "use_count", "cudaMalloc_count", "large_blocks", "small_blocks")

    def __init__(self, mempool_id):
        self.id = mempool_id
        self.use_count = 1  # whoever asked for the pool holds the first reference
        self.cudaMalloc_count = 0
        self.large_blocks = BlockPool(is_small=False)
        self.small_blocks = BlockPool(is_small=True)
        for pool in (self.large_blocks, self.small_blocks):
            pool.owner_private_pool = self
            pool.mempool_id = mempool_id

    def block_pools(self) -> tuple:
        return (self.small_blocks, self.large_blocks)

    def __repr__(self):
        return (f"PrivatePool(id={self.id}, use_count={self.use_count}, "
                f"cudaMalloc_count={self.cudaMalloc_count})")


def check_mempool_id(mempool_id) -> tuple:
    """A ``MempoolId_t``: a tuple (or list) of two non-negative ints, returned as a tuple."""
    if (not isinstance(mempool_id, (tuple, list)) or len(mempool_id) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in mempool_id)):
        raise PoolError(f"a memory pool id is a tuple of two non-negative ints, not {mempool_id!r}")
    return (mempool_id[0], mempool_id[1])


class PrivatePoolStats:
    """``reserved_bytes_by_private_pools``: a reserved-bytes Stat array per private pool id.

    An entry appears when a pool first reserves memory and stays after the pool is forgotten
    (its current drops to 0), so its peak can still be read."""

    __slots__ = ("by_id",)

    def __init__(self):
        self.by_id = {}

    def change(self, mempool_id, stat_types, amount: int) -> None:
        stats = self.by_id.get(mempool_id)
        if stats is None:
            stats = self.by_id[mempool_id] = (Stat(), Stat(), Stat())
        for t in stat_types:
            if amount >= 0:
                stats[t].increase(amount)
            else:
                stats[t].decrease(-amount)

    def reset_peak(self) -> None:
        for stats in self.by_id.values():
            for s in stats:
                s.reset_peak()

    def reset_accumulated(self) -> None:
        for stats in self.by_id.values():
            for s in stats:
                s.reset_accumulated()

    def as_nested_dict(self, names) -> dict:
        return {pid: {names[i]: s.as_dict() for i, s in enumerate(stats)}
                for pid, stats in sorted(self.by_id.items())}

    def as_flat_items(self, names) -> list:
        """memory_stats' flattened keys: the id tuple joined with "_" ((0, 1) -> "0_1")."""
        items = []
        for pid, stats in self.by_id.items():
            key = f"{pid[0]}_{pid[1]}"
            for i, s in enumerate(stats):
                for field, value in s.as_dict().items():
                    items.append((f"reserved_bytes_by_private_pools.{key}.{names[i]}.{field}",
                                  value))
        return items
