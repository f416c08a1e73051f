"""The pinned host memory a script asks for while ``gpumemlab plan`` runs it, on the kit's model of
``CachingHostAllocator`` (``allocator/host``).

Under the planner, pinning makes an ordinary CPU tensor (``script_mode``); each request that would
have been pinned (``Tensor.pin_memory()``, a factory with ``pin_memory=True`` such as the one
``torch.autograd.graph.save_on_cpu(pin_memory=True)`` makes per saved tensor, a
``DataLoader(pin_memory=True)``'s batches) is allocated here at the tensor's size and freed when
the tensor is collected. The allocator rounds and caches as PyTorch's does (under the
``pinned_*`` settings of the alloc_conf), so ``pinned_peak_bytes`` is its
``allocated_bytes.peak``: what the host would pin, cached blocks included.
"""
from __future__ import annotations

import weakref

from gpumemlab.allocator import AllocatorConfig
from gpumemlab.allocator.host.caching_host_allocator import CachingHostAllocator

__all__ = ["HostLedger"]


class HostLedger:
    def __init__(self, alloc_conf: str = ""):
        self.allocator = CachingHostAllocator(AllocatorConfig.parse(alloc_conf or ""))
        self.requests = 0
        self.requested_bytes = 0

    def pin(self, t):
        """Count ``t`` (a CPU tensor standing for a pinned one) until it is collected."""
        nbytes = t.numel() * t.element_size()
        block = self.allocator.allocate(nbytes)
        self.requests += 1
        self.requested_bytes += nbytes
        if block is not None:
            weakref.finalize(t, self.allocator.free, block)
        return t

    def figures(self) -> dict:
        stats = self.allocator.host_memory_stats()
        return {"pinned_peak_bytes": stats["allocated_bytes.peak"],
                "pinned_requests": self.requests, "requested_bytes": self.requested_bytes}
