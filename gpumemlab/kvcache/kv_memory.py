"""Where the contiguous strategies get their per-request KV buffers: the simulated GPU.

An adapter over ``gpumemlab.devices.simulated.SimulatedGPU`` (PyTorch's caching allocator rules: rounding,
best fit, splitting, caching freed blocks, releasing cached segments and retrying on OOM), so that
the external fragmentation of Orca-style reservations comes from the real allocator, not from a
formula. History recording is off, for speed.
"""
from __future__ import annotations

from gpumemlab.allocator import OutOfMemoryError as _OOM
from gpumemlab.devices.simulated import SimulatedGPU


class AllocatorKVMemory:
    """KV buffers of one simulated GPU whose whole memory is ``kv_memory_bytes``."""

    def __init__(self, kv_memory_bytes: int, alloc_conf: str = ""):
        self.total_bytes = kv_memory_bytes
        self.failed_allocations = 0
        self.gpu = SimulatedGPU(total_memory=kv_memory_bytes, alloc_conf=alloc_conf,
                                record_history=False, name="Simulated GPU (KV memory)")
        self.allocator = self.gpu.allocator

    def alloc(self, nbytes: int):
        """A buffer (with ``.size``, the rounded block size) or ``None`` when the allocator is out of memory."""
        try:
            return self.gpu.empty(nbytes)
        except _OOM:
            self.failed_allocations += 1
            return None

    def free(self, buf) -> None:
        buf.free()

    def reserved_bytes(self) -> int:
        """Bytes in the allocator's segments (``memory_reserved``)."""
        return self.allocator.total_allocated_memory

    def snapshot(self) -> dict:
        """PyTorch's ``_snapshot()`` dict of the KV memory now."""
        return self.gpu.snapshot()
