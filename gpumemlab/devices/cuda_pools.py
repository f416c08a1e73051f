"""The pool and graph part of ``CudaGPU``: ``MemPool``, ``use_mem_pool``, ``graph_pool_handle``,
``CUDAGraph`` and ``graph``, passed straight to ``torch.cuda`` on the card, so that a workload
written against ``SimulatedGPU``'s pool API (``pools_api``) runs on a real card unchanged.

Allocations made by ``CudaGPU.empty`` inside ``with gpu.graph(g, pool=...)`` go to the graph's
private pool, as any ``torch.empty`` on the capture stream does: no kernel needs to run for the
allocator to record them. On a torch without ``torch.cuda.MemPool`` (older than 2.6) the
MemPool methods raise one line saying so.
"""
from __future__ import annotations


class CudaPoolsAPI:
    """Mixed into ``CudaGPU``; uses its ``_torch``, ``_dev`` and ``_check_open``."""

    def _pool_api(self, name: str):
        self._check_open()
        api = getattr(self._torch.cuda, name, None)
        if api is None:
            raise NotImplementedError(f"torch.cuda.{name} does not exist in torch "
                                      f"{self._torch.__version__}: this needs a newer torch")
        return api

    def graph_pool_handle(self):
        return self._pool_api("graph_pool_handle")()

    def CUDAGraph(self, keep_graph: bool = False):  # noqa: N802  (torch.cuda.CUDAGraph)
        cls = self._pool_api("CUDAGraph")
        try:
            return cls(keep_graph=keep_graph)
        except TypeError:           # torch before keep_graph existed
            return cls()

    def graph(self, cuda_graph, pool=None, stream=None):
        return self._pool_api("graph")(cuda_graph, pool=pool, stream=stream)

    def MemPool(self, use_on_oom: bool = False, no_split: bool = False):  # noqa: N802
        cls = self._pool_api("MemPool")
        kwargs = {k: v for k, v in (("use_on_oom", use_on_oom), ("no_split", no_split)) if v}
        return cls(**kwargs)

    def use_mem_pool(self, pool):
        return self._pool_api("use_mem_pool")(pool, device=self._dev)
