"""``MemPool`` and ``use_mem_pool`` on the simulated GPU, as ``torch.cuda.MemPool`` /
``torch.cuda.use_mem_pool`` (torch/cuda/memory.py) and their C++ side (at::cuda::MemPool).

``MemPool()`` creates a private pool ``(0, n)`` with one user (the object itself) and marks it
``use_on_oom`` / ``no_split`` if asked. ``with gpu.use_mem_pool(pool):`` routes the calling
thread's allocations (any stream) to the pool, holding a second reference while inside. When the
last reference to the MemPool object goes, its destructor does what ``~MemPool`` does: unmark
use_on_oom, release the pool, and ``emptyCache(pool.id)`` (whole free segments of the pool go
back at once if no other user, e.g. a graph, still holds it; live blocks keep theirs until freed
and the next ``empty_cache``). Pluggable allocators (the ``allocator`` argument) are not modelled.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

from gpumemlab.allocator.private_pool import PoolError


class MemPool:
    """A private memory pool of one simulated device (``torch.cuda.MemPool``).

    Made with ``gpu.MemPool(use_on_oom=False, no_split=False)``. ``id`` is the pool's
    ``(0, n)`` tuple; ``use_count()`` its users; ``snapshot()`` its segments."""

    def __init__(self, gpu, use_on_oom: bool = False, no_split: bool = False):
        for name, value in (("use_on_oom", use_on_oom), ("no_split", no_split)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
        self._gpu_ref = weakref.ref(gpu)
        self._device = gpu.device_index
        self._lock = gpu._lock
        self._released = True  # until the pool exists: nothing for the destructor to undo
        alloc = gpu.allocator
        with self._lock:
            self._id = gpu._next_pool_id(user_created=True)
            alloc.create_or_incref_pool(self._id)
            if use_on_oom:
                alloc.set_use_on_oom(self._id, True)
            if no_split:
                alloc.set_no_split(self._id)
        self._released = False
        self._alloc = alloc  # kept so that the destructor can run after the device wrapper went

    @property
    def id(self) -> tuple:
        """The pool's id, a tuple of two ints (``(0, n)`` for a user-created pool)."""
        return self._id

    @property
    def device(self) -> int:
        return self._device

    def use_count(self) -> int:
        """How many users hold the pool (this object, open ``use_mem_pool`` contexts, graphs)."""
        return self._alloc.get_pool_use_count(self._id)

    def snapshot(self, include_traces: bool = True) -> list:
        """``torch.cuda.memory_snapshot(pool.id)``: the segments of this pool."""
        gpu = self._gpu_ref()
        if gpu is None:
            raise ValueError("the device of this MemPool is gone")
        return gpu.memory_snapshot(self._id, include_traces=include_traces)

    def _release(self) -> None:
        # ~MemPool: setUseOnOOM(false), releasePool, emptyCache(id).
        if self._released:
            return
        self._released = True
        alloc = self._alloc
        with self._lock:
            alloc.set_use_on_oom(self._id, False)
            alloc.release_pool(self._id)
            alloc.empty_cache(None, self._id)

    def __del__(self):
        try:
            self._release()
        except Exception:  # interpreter shutdown: nothing to report to
            pass

    def __repr__(self):
        return f"<MemPool {self._id} on device {self._device}>"


def check_own_pool(gpu, pool) -> MemPool:
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool takes a MemPool from gpu.MemPool(), not "
                        f"{type(pool).__name__}")
    if pool._gpu_ref() is not gpu:
        raise PoolError(f"MemPool {pool.id} belongs to another device; use one made by this "
                        f"device's gpu.MemPool()")
    if pool._released:
        raise PoolError(f"MemPool {pool.id} was released")
    return pool


@contextlib.contextmanager
def use_mem_pool(gpu, pool):
    """Route the calling thread's allocations to ``pool`` while inside (torch.cuda.use_mem_pool).

    Nesting the same pool is refused as c10 refuses it ("already recording to mempool_id");
    nesting different pools routes to the innermost."""
    check_own_pool(gpu, pool)
    alloc = gpu.allocator
    tid = threading.get_ident()
    with gpu._lock:
        alloc.begin_allocate_to_pool(pool.id, lambda stream: threading.get_ident() == tid)
    try:
        yield pool
    finally:
        with gpu._lock:
            alloc.end_allocate_to_pool(pool.id)
            alloc.release_pool(pool.id)
