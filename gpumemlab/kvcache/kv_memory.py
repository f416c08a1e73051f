"""Where the contiguous strategies get their per-request KV buffers: the simulated GPU.

An adapter over ``gpumemlab.devices.simulated.SimulatedGPU`` (PyTorch's caching allocator rules: rounding,
best fit, splitting, caching freed blocks, releasing cached segments and retrying on OOM), so that
the external fragmentation of Orca-style reservations comes from the real allocator, not from a
formula. When ``gpumemlab.devices.simulated`` is not importable it drives the same model's
``DeviceCachingAllocator`` directly. History recording is off, for speed.
"""
from __future__ import annotations

from gpumemlab.allocator import OutOfMemoryError as _OOM


class AllocatorKVMemory:
    """KV buffers of one simulated GPU whose whole memory is ``kv_memory_bytes``."""

    def __init__(self, kv_memory_bytes: int, alloc_conf: str = ""):
        self.total_bytes = kv_memory_bytes
        self.failed_allocations = 0
        try:
            from gpumemlab.devices.simulated import SimulatedGPU
        except ImportError:
            SimulatedGPU = None
        if SimulatedGPU is not None:
            self.gpu = SimulatedGPU(total_memory=kv_memory_bytes, alloc_conf=alloc_conf,
                                    record_history=False, name="Simulated GPU (KV memory)")
            self._alloc, self.allocator = self.gpu.empty, self.gpu.allocator
            self._free = lambda buf: buf.free()
        else:  # fallback while the device facade is absent; same allocator rules
            from gpumemlab.allocator import AllocatorConfig, DeviceCachingAllocator
            self.gpu = None
            self.allocator = DeviceCachingAllocator(kv_memory_bytes, AllocatorConfig.parse(alloc_conf),
                                                    record_history=False)
            self._alloc, self._free = self.allocator.malloc, self.allocator.free

    def alloc(self, nbytes: int):
        """A buffer (with ``.size``, the rounded block size) or ``None`` when the allocator is out of memory."""
        try:
            return self._alloc(nbytes)
        except _OOM:
            self.failed_allocations += 1
            return None

    def free(self, buf) -> None:
        self._free(buf)

    def reserved_bytes(self) -> int:
        """Bytes in the allocator's segments (``memory_reserved``)."""
        return self.allocator.total_allocated_memory

    def snapshot(self) -> dict:
        """PyTorch's ``_snapshot()`` dict of the KV memory now."""
        return self.gpu.snapshot() if self.gpu is not None else self.allocator.snapshot()
