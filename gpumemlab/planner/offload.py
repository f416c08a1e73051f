"""Offload as a planner lever: what moving saved activations (``torch.autograd.graph.save_on_cpu``)
or the optimizer state to pinned host memory costs on the host, in copy time, and saves on the card.

Host cost follows ``CachingHostAllocator``: ``save_on_cpu(pin_memory=True)``'s pack makes one pinned
CPU tensor per saved tensor, of that tensor's size (``torch.empty(size, pin_memory=True)`` then
``copy_``), so every saved tensor is its own pinned request and is rounded on its own
(``allocator/host/rounding.pinned_bytes``, under ``pinned_max_round_threshold_mb`` and
``pinned_max_cached_size_mb`` when the alloc_conf sets them). They are all alive at the end of a
forward, so the host holds their rounded sum; the blocks freed in backward stay cached and the
next step's requests reuse them, so that sum is also what stays pinned.

Optimizer-state offload is planned as a CPU optimizer step (DeepSpeed's ZeRO-Offload, torchao's
``CPUOffloadOptimizer``): the states live in pinned host memory, one pinned block per state
tensor, never on the card; each step the gradients go to the host and the updated parameters
come back. The card's side is the traced step replayed without its optimizer-state allocations.

Copy time is bytes over a nominal one-way bandwidth (``LINKS``); real copies reach less, and
overlap with compute is not modelled.
"""
from __future__ import annotations

from types import SimpleNamespace

from gpumemlab.allocator import AllocatorConfig
from gpumemlab.allocator.host.rounding import pinned_bytes

__all__ = ["LINKS", "LINK_SOURCES", "pinned_total", "copy_ms", "without_category",
           "live_sizes"]

# Nominal bandwidth, one direction, bytes per second, with where it comes from (named in the
# planner's output as assumptions).
LINKS = {"PCIe 5 x16": 63e9, "NVLink-C2C": 450e9}
LINK_SOURCES = {
    "PCIe 5 x16": "PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b encoding = 63 GB/s each way "
                  "(PCI-SIG PCIe 5.0 base specification; ~64 GB/s before encoding)",
    "NVLink-C2C": "NVIDIA GH200 Grace Hopper: 900 GB/s bidirectional = 450 GB/s each way "
                  "(NVIDIA GH200 datasheet)",
}


def pinned_total(sizes, alloc_conf: str = "") -> int:
    """Bytes pinned for ``sizes``, each its own request, rounded as the host allocator rounds
    under ``alloc_conf`` (a PYTORCH_CUDA_ALLOC_CONF string)."""
    config = AllocatorConfig.parse(alloc_conf or "")
    return sum(pinned_bytes(s, config) for s in sizes)


def copy_ms(nbytes: int) -> dict:
    """Milliseconds to move ``nbytes`` one way over each link of ``LINKS``."""
    return {name: nbytes / bw * 1e3 for name, bw in LINKS.items()}


def live_sizes(trace, category: str) -> list:
    """Sizes of the ``category`` allocations still alive at the end of ``trace``."""
    live = {}
    for e in trace:
        if e["action"] == "alloc" and e.get("category") == category:
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    return list(live.values())


def without_category(trace, category: str):
    """A replayable source: ``trace`` without the allocations of ``category`` (and their frees),
    as if those tensors lived elsewhere."""
    kept, dropped = [], set()
    for e in trace:
        act, addr = e["action"], e.get("addr")
        if act == "alloc":
            if e.get("category") == category:
                dropped.add(addr)
                continue
            dropped.discard(addr)            # an address reused by another tensor
        elif act in ("free_requested", "free_completed") and addr in dropped:
            if act == "free_completed":
                dropped.discard(addr)
            continue
        kept.append(e)
    return SimpleNamespace(is_capture=True, trace=kept)
