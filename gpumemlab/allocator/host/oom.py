"""Pinned-memory failures and what explains them.

When ``cudaHostAlloc`` (or ``cudaHostRegister``) cannot pin a block, c10's ``C10_CUDA_CHECK``
raises at once: the host allocator has no retry and does not give its cached blocks back first
(``empty_cache`` is only ever called by the user). :class:`HostOutOfMemoryError` carries that
message and the numbers behind it; :func:`explain_host_oom` turns them into the explanation the
doctor prints: the bytes the rounding added, the bytes the cache holds, and the settings that cap
each (``pinned_max_round_threshold_mb``, ``pinned_max_cached_size_mb``, ``host_empty_cache``).
"""
from __future__ import annotations

from ..constants import K_MB, SIZE_MAX
from ..sizes import format_size
from .rounding import host_round_size

# What C10_CUDA_CHECK prints for cudaErrorMemoryAllocation (its first line; the rest is advice).
CUDA_OOM_LINE = "CUDA error: out of memory"


class HostOutOfMemoryError(RuntimeError):
    """A pin that did not fit: ``torch.empty(..., pin_memory=True)`` raising
    ``RuntimeError: CUDA error: out of memory`` from the host path."""

    def __init__(self, requested, block_size, config, memory, cached_bytes, use_register):
        self.requested_size = requested
        self.block_size = block_size
        self.pinned_bytes = memory.pinned
        self.host_memory = memory.total
        self.cached_bytes = cached_bytes
        self.use_register = use_register
        self.config = config
        api = "cudaHostRegister" if use_register else "cudaHostAlloc"
        super().__init__(f"{CUDA_OOM_LINE} ({api} of {format_size(block_size)} for a pinned "
                         f"request of {format_size(requested)})")

    def explanation(self) -> dict:
        return explain_host_oom(self.requested_size, config=self.config,
                                pinned_bytes=self.pinned_bytes, host_memory=self.host_memory,
                                cached_bytes=self.cached_bytes)


def _mb(value: int) -> str:
    return "unset" if value == SIZE_MAX else f"{value // K_MB} MiB"


def explain_host_oom(requested: int, config=None, *, pinned_bytes=None, host_memory=None,
                     cached_bytes=0) -> dict:
    """The facts about a failed pin of ``requested`` bytes: ``block_size`` (what was asked of
    CUDA), ``rounding_waste``, ``cached_bytes``, the two settings' values, which one would
    have removed the waste, and ``lines``: the explanation as sentences."""
    threshold = getattr(config, "pinned_max_round_threshold", SIZE_MAX)
    cached_cap = getattr(config, "pinned_max_cached_size", SIZE_MAX)
    block = host_round_size(requested, threshold, cached_cap)
    waste = block - requested
    lines = [f"PyTorch's pinned host allocator asked CUDA for {format_size(block)} to serve "
             f"{format_size(requested)}."]
    if waste:
        # roundSize rounds a request only when it is at most both caps; name the rule that
        # applied, since with a threshold set not every request is rounded
        caps = [f"{name}:{value // K_MB}" for name, value in
                (("pinned_max_round_threshold_mb", threshold),
                 ("pinned_max_cached_size_mb", cached_cap)) if value != SIZE_MAX]
        rule = ("It rounds every pinned request up to a power of two (no "
                "pinned_max_round_threshold_mb set)" if not caps else
                f"Under {' and '.join(caps)} it rounds a request of at most "
                f"{format_size(min(threshold, cached_cap))} up to a power of two, as this one")
        lines.append(f"{rule}: {format_size(waste)} of that ({100 * waste / block:.1f}%) is "
                     "rounding.")
        lines.append("Set PYTORCH_ALLOC_CONF=pinned_max_round_threshold_mb:<MiB> (PyTorch 2.13+) "
                     "so that requests above it are pinned at their exact size; "
                     f"with a threshold below {format_size(requested)} this one would pin "
                     f"{format_size(requested)}.")
    if cached_bytes:
        lines.append(f"{format_size(cached_bytes)} of freed pinned blocks were still cached: "
                     "the host allocator never gives them back on its own. Call "
                     "torch.accelerator.empty_host_cache() before the big pin, or cap what is "
                     "cached with pinned_max_cached_size_mb (blocks above it are freed, not "
                     "cached).")
    if host_memory is not None and pinned_bytes is not None:
        lines.append(f"{format_size(pinned_bytes)} of the host's {format_size(host_memory)} "
                     "pinnable memory was already pinned.")
    return {"requested": requested, "block_size": block, "rounding_waste": waste,
            "cached_bytes": cached_bytes, "pinned_bytes": pinned_bytes,
            "host_memory": host_memory,
            "pinned_max_round_threshold_mb": _mb(threshold),
            "pinned_max_cached_size_mb": _mb(cached_cap), "lines": lines}
