"""CUDA graphs on the simulated GPU: ``CUDAGraph`` and ``graph`` as torch/cuda/graphs.py has them,
with the memory side of aten's ``CUDAGraph::capture_begin/capture_end/replay/reset/pool``.

``capture_begin(pool)`` diverts every allocation on the capture stream into the graph's private
pool: the given one (``graph_pool_handle()``, another graph's ``pool()``, a ``MemPool.id``) or a
new ``(n, 0)`` pool of its own, which the graph holds one reference to until ``reset()`` (or
until the graph object goes, as its C++ destructor calls reset). Frees during the capture go back
to that pool and are reused within it; the pool's memory never serves the default pools, so what
a captured graph allocated stays reserved while the graph lives. ``replay()`` re-runs recorded
work: it makes no allocator calls at all. There is no kernel: a "captured op" is whatever
allocations and frees the code inside ``with gpu.graph(g):`` makes.
"""
from __future__ import annotations

from gpumemlab.allocator.private_pool import PoolError, check_mempool_id

from .mempool import MemPool


def _check_capture_stream(stream) -> int:
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise ValueError(f"capture stream must be a stream from gpu.Stream() (a positive int), "
                         f"not {stream!r}")
    if stream == 0:
        raise PoolError("CUDA graphs must be captured on a non-default stream. (However, after "
                        "capture, it's ok to replay them on the default stream.)")
    return stream


class CUDAGraph:
    """A captured graph of one simulated device (``torch.cuda.CUDAGraph``)."""

    def __init__(self, gpu, keep_graph: bool = False):
        self._gpu = gpu
        self._alloc = gpu.allocator
        self.keep_graph = keep_graph
        self._mempool_id = None
        self._capture_stream = None
        self._capturing = False
        self._capture_ended = False
        self._has_graph_exec = False
        self.replays = 0

    def capture_begin(self, pool=None, stream=None) -> None:
        """Start capturing the allocations on ``stream`` (default: the current stream)."""
        if self._has_graph_exec or self._capturing:
            raise PoolError("This CUDAGraph instance already owns a captured graph. To capture a "
                            "new graph, create a new instance.")
        gpu = self._gpu
        stream = _check_capture_stream(gpu.current_stream() if stream is None else stream)
        if pool is None:
            mempool_id = gpu._next_pool_id(user_created=False)
        else:
            mempool_id = self._check_pool(pool)
        alloc = self._alloc
        with gpu._lock:
            alloc.begin_allocate_to_pool(mempool_id, lambda s: s == stream)
            alloc.notify_capture_begin()
        self._mempool_id = mempool_id
        self._capture_stream = stream
        self._capturing = True

    def _check_pool(self, pool) -> tuple:
        gpu = self._gpu
        if isinstance(pool, MemPool):
            if pool._gpu_ref() is not gpu:
                raise PoolError(f"MemPool {pool.id} belongs to another device")
            if pool._released:
                raise PoolError(f"MemPool {pool.id} was released")
            return pool.id
        mempool_id = check_mempool_id(pool)
        if mempool_id == (0, 0):
            raise PoolError("(0, 0) is the default pool; pass None to let the graph make its own")
        if mempool_id[0] and mempool_id[1]:
            raise PoolError(f"{mempool_id} is not a pool handle (only one of its ints is nonzero)")
        if not gpu._issued_pool_id(mempool_id):
            raise PoolError(f"pool {mempool_id} was not made on this device (another GPU's "
                            f"handle?)")
        return mempool_id

    def capture_end(self) -> None:
        if not self._capturing:
            raise PoolError("capture_end() called before capture_begin().")
        alloc = self._alloc
        with self._gpu._lock:
            alloc.notify_capture_end()
            alloc.end_allocate_to_pool(self._mempool_id)
        self._capturing = False
        self._capture_ended = True
        self._has_graph_exec = True

    def replay(self) -> None:
        """Launch the captured work: no allocation, no free (addresses were baked in)."""
        if not self._capture_ended:
            raise PoolError("Called CUDAGraph::replay without a preceding successful capture.")
        self.replays += 1

    def reset(self) -> None:
        """Destroy the captured graph and release its hold on the pool (aten ``reset``)."""
        with self._gpu._lock:
            if self._capturing:  # a capture left unfinished: undo its diversion
                self._alloc.notify_capture_end()
                self._alloc.end_allocate_to_pool(self._mempool_id)
                self._capturing = False
                self._capture_ended = True
            if self._capture_ended:
                self._alloc.release_pool(self._mempool_id)
                self._capture_ended = False
        self._has_graph_exec = False

    def pool(self) -> tuple:
        """The id another capture can pass to share this graph's pool."""
        if not self._capture_ended:
            raise PoolError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._mempool_id

    def __del__(self):
        try:
            self.reset()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self):
        state = ("capturing" if self._capturing else "captured" if self._capture_ended
                 else "empty")
        return f"<CUDAGraph {state}, pool {self._mempool_id}>"


class graph:
    """``with gpu.graph(g, pool=None, stream=None):`` captures into ``g`` (torch.cuda.graph).

    On entry, as torch: synchronize, ``empty_cache()``, make the capture stream current, then
    ``capture_begin``; on exit ``capture_end`` and restore the stream."""

    def __init__(self, gpu, cuda_graph: CUDAGraph, pool=None, stream=None):
        if not isinstance(cuda_graph, CUDAGraph) or cuda_graph._gpu is not gpu:
            raise TypeError("graph() takes a CUDAGraph made by this device's gpu.CUDAGraph()")
        self._gpu = gpu
        self.cuda_graph = cuda_graph
        self.pool = pool
        if stream is None:
            stream = gpu._default_capture_stream()
        self.capture_stream = _check_capture_stream(stream)
        self._stream_ctx = None

    def __enter__(self):
        gpu = self._gpu
        gpu.synchronize()
        gpu.empty_cache()
        self._stream_ctx = gpu.stream(self.capture_stream)
        self._stream_ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, stream=self.capture_stream)
        except BaseException:
            self._stream_ctx.__exit__(None, None, None)
            raise
        return self.cuda_graph

    def __exit__(self, *exc):
        try:
            self.cuda_graph.capture_end()
        finally:
            self._stream_ctx.__exit__(*exc)
        return False
