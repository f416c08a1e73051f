"""The pinned-host part of ``SimulatedGPU``: ``pin``, ``copy_``, ``host_memory_stats``,
``host_empty_cache`` and the host keys of ``snapshot()``.

``gpu.pin(nbytes)`` plays ``torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)``: a
:class:`PinnedAllocation` from the model of PyTorch's caching host allocator
(gpumemlab/allocator/host/), freed when its last reference goes. ``gpu.copy_(dst, src,
non_blocking=True)`` between a pinned and a device allocation is what ``tensor.copy_`` does in
at::native::copy_kernel_cuda: the copy is queued on the current stream and the pinned block gets
``CachingHostAllocator_recordEvent``, so after ``free`` it is not reused until that stream's work
is done (``synchronize()``). A blocking copy synchronizes the stream and records nothing.
"""
from __future__ import annotations

from gpumemlab.allocator.host import CachingHostAllocator, HostOutOfMemoryError, host_snapshot
from gpumemlab.units import format_size, parse_size


class PinnedAllocation:
    """Pinned host memory from ``gpu.pin()``, like a tensor made with ``pin_memory=True``.

    Attributes: ``address``, ``nbytes`` (requested), ``size`` (the pinned block, after
    rounding)."""

    __slots__ = ("_gpu", "_block", "address", "nbytes", "size", "__weakref__")

    def __init__(self, gpu, block, nbytes):
        self._gpu, self._block = gpu, block
        self.address = block.ptr if block is not None else 0
        self.nbytes = nbytes
        self.size = block.size if block is not None else 0

    @property
    def freed(self) -> bool:
        return self._gpu is None

    def free(self) -> None:
        if self._gpu is None:
            raise ValueError(f"double free: the pinned allocation at {self.address:#x} was "
                             "already freed")
        gpu, block = self._gpu, self._block
        self._gpu = self._block = None
        if block is not None:
            with gpu._lock:
                gpu.host_allocator.free(block)

    def __del__(self):
        if self._gpu is not None:
            try:
                self.free()
            except Exception:  # interpreter shutdown: nothing to report to
                pass

    def __repr__(self):
        if self.freed:
            return f"<PinnedAllocation of {format_size(self.nbytes)} (freed)>"
        return (f"<PinnedAllocation of {format_size(self.nbytes)} at {self.address:#x} "
                f"(pinned block {format_size(self.size)})>")


class HostAPI:
    def _init_host_api(self, host_memory, record_history: bool) -> None:
        allocator = self.allocator
        total = None if host_memory is None else parse_size(host_memory, name="host_memory")

        def clock():  # one timeline with the device's trace (its logical time_us)
            allocator.clock += 1
            return allocator.clock

        self.host_allocator = CachingHostAllocator(
            allocator.config, total, is_busy=lambda s: s in allocator.busy_streams, clock=clock)
        self.host_allocator.record_history = record_history

    def pin(self, nbytes) -> PinnedAllocation:
        """Pinned host memory of ``nbytes`` (an int or "2GiB"): ``torch.empty(...,
        pin_memory=True)``. A pin the host cannot hold raises HostOutOfMemoryError
        ("CUDA error: out of memory"), as cudaHostAlloc's failure does."""
        if type(nbytes) is not int or nbytes <= 0:  # noqa: E721
            nbytes = parse_size(nbytes, name="nbytes")
        with self._lock:
            block = self.host_allocator.allocate(nbytes)
        return PinnedAllocation(self, block, nbytes)

    def copy_(self, dst, src, non_blocking: bool = False, stream: int | None = None) -> None:
        """``dst.copy_(src, non_blocking=...)`` between pinned host and device memory (either
        way). Non-blocking from or to a pinned block: the copy is queued on ``stream`` (the
        current one by default) and the block waits for it after ``free``."""
        if stream is None:
            stream = self.current_stream()
        pinned = [a for a in (dst, src) if isinstance(a, PinnedAllocation)]
        device = [a for a in (dst, src) if isinstance(a, self._allocation_type)]
        if len(pinned) != 1 or len(device) != 1:
            raise TypeError("copy_ copies between one pinned allocation (gpu.pin) and one device "
                            "allocation (gpu.empty)")
        for a in pinned + device:
            if a.freed:
                raise ValueError(f"copy_ from or to a freed allocation at {a.address:#x}")
        if src.nbytes > dst.nbytes:
            raise ValueError(f"copy_ of {src.nbytes} bytes into {dst.nbytes}")
        with self._lock:
            if non_blocking:
                self.allocator.busy_streams.add(stream)  # the copy is work queued on stream
                if pinned[0]._block is not None:
                    self.host_allocator.record_event(pinned[0]._block, stream)
            else:
                self.allocator.busy_streams.discard(stream)  # copy, then stream_synchronize

    def host_memory_stats(self):
        """``torch.cuda.memory.host_memory_stats()``."""
        return self.host_allocator.host_memory_stats()

    def host_memory_stats_as_nested_dict(self) -> dict:
        return self.host_allocator.host_memory_stats_as_nested_dict()

    def host_empty_cache(self) -> None:
        """``torch.accelerator.empty_host_cache()``: free the cached pinned blocks."""
        with self._lock:
            self.host_allocator.empty_cache()

    def reset_peak_host_memory_stats(self) -> None:
        self.host_allocator.reset_peak_stats()

    def reset_accumulated_host_memory_stats(self) -> None:
        self.host_allocator.reset_accumulated_stats()

    def host_pinned_bytes(self) -> int:
        """Bytes pinned on the host now (blocks in use, cached or waiting for events)."""
        return self.host_allocator.memory.pinned

    def _host_snapshot(self) -> dict:
        return host_snapshot(self.host_allocator)


__all__ = ["HostAPI", "PinnedAllocation", "HostOutOfMemoryError"]
