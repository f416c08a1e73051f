"""The pool, graph and stream part of ``SimulatedGPU``'s torch.cuda-shaped API:
``MemPool``, ``use_mem_pool``, ``graph_pool_handle``, ``CUDAGraph``, ``graph``, ``Stream``,
``stream``, ``current_stream`` and ``memory_snapshot(mempool_id, include_traces)``.

Streams are ints (0 is the default stream); ``gpu.Stream()`` hands out a fresh one. The current
stream is per thread, as torch's: ``with gpu.stream(s):`` makes ``gpu.empty(n)`` allocate on s.
Pool ids come from two counters per device, both starting at 1 (c10 ``generate_mempool_id``:
user-created ``(0, n)``, graph-created ``(n, 0)``). torch's counters are per process; the model
counts per device so that a fresh simulated GPU always gives the same ids.
"""
from __future__ import annotations

import contextlib
import threading

from gpumemlab.allocator.private_pool import DEFAULT_POOL_ID, check_mempool_id

from . import graphs
from .mempool import MemPool as _MemPool
from .mempool import use_mem_pool as _use_mem_pool


class PoolsAPI:
    def _init_pools_api(self) -> None:
        self._uid = 1  # next user-created pool id (0, uid)
        self._uuid = 1  # next graph-created pool id (uuid, 0)
        self._next_stream_id = 1
        self._capture_stream = None
        self._tls = threading.local()

    def _next_pool_id(self, user_created: bool) -> tuple:
        if user_created:
            pid, self._uid = (0, self._uid), self._uid + 1
        else:
            pid, self._uuid = (self._uuid, 0), self._uuid + 1
        return pid

    def _issued_pool_id(self, mempool_id) -> bool:
        first, second = mempool_id
        return (first == 0 and 0 < second < self._uid) or (second == 0 and 0 < first < self._uuid)

    # ------------------------------------------------------------------ streams
    def Stream(self) -> int:  # noqa: N802  (torch.cuda.Stream)
        """A new stream handle (an int not handed out before by this device)."""
        s = self._next_stream_id
        self._next_stream_id += 1
        return s

    def current_stream(self) -> int:
        return getattr(self._tls, "stream", 0)

    @contextlib.contextmanager
    def stream(self, stream: int):
        """``torch.cuda.stream(s)``: allocations of this thread go to ``stream`` while inside."""
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise ValueError(f"stream must be a non-negative int (0 = default stream), "
                             f"got {stream!r}")
        previous = self.current_stream()
        self._tls.stream = stream
        try:
            yield stream
        finally:
            self._tls.stream = previous

    def _default_capture_stream(self) -> int:
        # torch.cuda.graph makes one side stream, lazily, and reuses it for every capture.
        if self._capture_stream is None:
            self._capture_stream = self.Stream()
        return self._capture_stream

    # ------------------------------------------------------------------ pools
    def MemPool(self, use_on_oom: bool = False, no_split: bool = False) -> _MemPool:  # noqa: N802
        """``torch.cuda.MemPool(use_on_oom=False, no_split=False)`` on this device."""
        return _MemPool(self, use_on_oom=use_on_oom, no_split=no_split)

    def use_mem_pool(self, pool: _MemPool):
        """``torch.cuda.use_mem_pool(pool)``: this thread's allocations go to ``pool``."""
        return _use_mem_pool(self, pool)

    def graph_pool_handle(self) -> tuple:
        """``torch.cuda.graph_pool_handle()``: an id for graphs to share (no pool exists yet)."""
        return self._next_pool_id(user_created=True)

    def CUDAGraph(self, keep_graph: bool = False) -> graphs.CUDAGraph:  # noqa: N802
        return graphs.CUDAGraph(self, keep_graph=keep_graph)

    def graph(self, cuda_graph, pool=None, stream=None) -> graphs.graph:
        """``torch.cuda.graph(g, pool=None, stream=None)``: a capture context."""
        return graphs.graph(self, cuda_graph, pool=pool, stream=stream)

    def memory_snapshot(self, mempool_id=None, include_traces: bool = True) -> list:
        """``torch.cuda.memory_snapshot(mempool_id=None, include_traces=True)``: the segments;
        with a pool id only that private pool's."""
        if not isinstance(include_traces, bool):
            raise TypeError("include_traces must be a bool")
        pid = DEFAULT_POOL_ID if mempool_id is None else check_mempool_id(mempool_id)
        return self.allocator.segments_snapshot(pid)
