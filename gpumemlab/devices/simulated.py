"""``SimulatedGPU``: a GPU whose memory is managed by the allocator model, behind the same
memory API as ``torch.cuda`` (memory_allocated, memory_reserved, memory_stats,
memory_summary, empty_cache, set_per_process_memory_fraction, _snapshot, ...).

``gpu.empty(nbytes)`` plays the part of ``torch.empty(nbytes, dtype=torch.uint8, device="cuda")``:
it returns an :class:`Allocation` that is freed when its last reference goes, like a tensor.
Private pools, CUDA graphs and streams (``MemPool``, ``use_mem_pool``, ``CUDAGraph``, ``graph``,
``Stream``, ``stream``) come from :class:`~gpumemlab.devices.pools_api.PoolsAPI`. One lock
serialises the allocator's operations, as c10's per-device mutex does.
"""
from __future__ import annotations

import os
import threading

from gpumemlab.allocator import (ONE_EXA_BYTES, AllocatorConfig, DeviceCachingAllocator,
                                 alloc_conf_from_environ, memory_summary)
from gpumemlab.allocator import trace as _tr
from gpumemlab.allocator.driver import CudaError as _AllocatorCudaError
from gpumemlab.allocator.frames import capture as _capture_frames
from gpumemlab.allocator.oom import OutOfMemoryError as _AllocatorOOM
from .errors import CudaError, OutOfMemoryError
from .host_api import HostAPI, PinnedAllocation  # noqa: F401  (PinnedAllocation: gml's name)
from .pools_api import PoolsAPI
from gpumemlab.units import format_size, parse_size

_MAX_TOTAL_MEMORY = 1 << 50  # 1 PiB: far beyond any GPU, small enough to stay meaningful
# Frames inside gpumemlab are left out of what is recorded (the learner's code is what matters).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FRAME_LIMIT = 12  # frames kept per allocation, innermost first
# The newest history entries a simulated GPU keeps unless told otherwise (a ring, as PyTorch's
# max_entries). PyTorch's own default is unbounded; bounded here so a learner's long loop cannot
# fill a laptop's memory (about 15 MiB of history at this size). Pass max_entries=sys.maxsize to
# keep a whole trace.
DEFAULT_MAX_ENTRIES = 100_000


class SizeTooLargeError(OutOfMemoryError, ValueError):
    """A request of 1 EB or more: PyTorch raises its OOM at once; also a ValueError."""


class Allocation:
    """Memory handed out by a device, like a tensor's storage. Freed by ``free()`` or when the
    last reference goes.

    Attributes: ``address`` (int), ``nbytes`` (what was requested), ``size`` (the block the
    allocator handed out, after rounding), ``stream``.
    """

    __slots__ = ("_gpu", "_block", "address", "nbytes", "size", "stream", "__weakref__")

    def __init__(self, gpu, block, nbytes, stream):
        self._gpu = gpu
        self._block = block
        self.address = block.ptr if block is not None else 0
        self.nbytes = nbytes
        self.size = block.size if block is not None else 0
        self.stream = stream

    @property
    def freed(self) -> bool:
        return self._block is None and self._gpu is None

    def free(self) -> None:
        """Give the memory back to the allocator's cache (as ``del tensor`` does)."""
        if self._gpu is None:
            raise ValueError(f"double free: the allocation at {self.address:#x} was already freed")
        gpu, block = self._gpu, self._block
        self._gpu = self._block = None
        if block is not None:
            gpu._free_block(block)

    def __del__(self):
        if self._gpu is not None:
            try:
                self.free()
            except Exception:  # interpreter shutdown or a broken device: nothing to report to
                pass

    def __repr__(self):
        if self.freed:
            return f"<Allocation of {format_size(self.nbytes)} (freed)>"
        return (f"<Allocation of {format_size(self.nbytes)} at {self.address:#x} "
                f"(block {format_size(self.size)}, stream {self.stream})>")


class SimulatedGPU(PoolsAPI, HostAPI):
    """A GPU of ``total_memory`` bytes run by a faithful model of PyTorch's caching allocator.

    Args:
        total_memory: bytes, or a string like "24GiB", "80GB", "512MiB".
        alloc_conf: a ``PYTORCH_CUDA_ALLOC_CONF`` string. ``None`` (default) reads
            ``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF`` from the environment, as PyTorch does.
        record_history: keep the allocator's history for ``snapshot()`` (like
            ``torch.cuda.memory._record_memory_history(max_entries=...)``).
        max_entries: the newest history entries kept (a ring buffer); ``DEFAULT_MAX_ENTRIES``
            (100,000) unless given, ``sys.maxsize`` for the whole history (PyTorch's default).
        record_frames: attach the caller's Python frames to each allocation.
        other_memory: bytes in use outside PyTorch's allocator (a real GPU loses a few hundred
            MiB to the CUDA context; other processes may hold more). 0 by default, so that every
            byte of ``total_memory`` is the allocator's and the lessons' numbers stay exact.
        host_memory: the host's pinnable bytes for ``pin()`` (None, the default: no limit).
        record_pinned_host_memory: put ``host_segments``/``host_traces`` in ``snapshot()``, as
            PyTorch 2.14's ``_record_memory_history(..., record_pinned_host_memory=True)``.
    """

    kind = "simulated"
    _allocation_type = Allocation  # what copy_ accepts as the device side

    def __init__(self, total_memory="24GiB", alloc_conf: str | None = None, *, device_index: int = 0,
                 record_history: bool = True, max_entries: int = DEFAULT_MAX_ENTRIES,
                 record_frames: bool = True, name: str = "Simulated GPU", other_memory=0,
                 host_memory=None, record_pinned_host_memory: bool = False):
        total = parse_size(total_memory, name="total_memory")
        if total < 2 * 1024 * 1024:
            raise ValueError(f"total_memory must be at least 2 MiB (one small segment), got {total}")
        if total > _MAX_TOTAL_MEMORY:
            raise ValueError(f"total_memory of {format_size(total)} is absurd (more than 1 PiB)")
        other = parse_size(other_memory, name="other_memory")
        if other >= total:
            raise ValueError(f"other_memory ({format_size(other)}) must be less than total_memory "
                             f"({format_size(total)})")
        if isinstance(device_index, bool) or not isinstance(device_index, int) or device_index < 0:
            raise ValueError(f"device_index must be a non-negative int, got {device_index!r}")
        if alloc_conf is None:
            alloc_conf = alloc_conf_from_environ(os.environ)
        config = AllocatorConfig.parse(alloc_conf)
        self.name = name
        self.device_index = device_index
        self.record_frames = record_frames
        self.allocator = DeviceCachingAllocator(total, config=config, device=device_index,
                                                record_history=record_history,
                                                max_entries=max_entries, other_memory=other)
        self._lock = threading.RLock()
        self._init_pools_api()
        self._init_host_api(host_memory, record_pinned_host_memory)

    # ------------------------------------------------------------------ identity
    @property
    def total_memory(self) -> int:
        return self.allocator.total_memory

    def describe(self) -> str:
        """One line saying which device this is."""
        settings = self.allocator.config.last_allocator_settings or "default settings"
        other = self.allocator.driver.other_bytes
        held = f", {format_size(other)} held outside PyTorch" if other else ""
        return (f"{self.name} {self.device_index}: {format_size(self.total_memory)} simulated{held} "
                f"(PyTorch's CUDA caching allocator modelled in Python, no real GPU memory); "
                f"allocator settings: {settings}")

    def __repr__(self):
        return f"<{self.describe()}>"

    # ------------------------------------------------------------------ allocation
    def empty(self, nbytes, stream: int | None = None) -> Allocation:
        """Allocate ``nbytes`` (an int, or a string like "2GiB") on ``stream`` (default: this
        thread's current stream, 0 unless inside ``with gpu.stream(s):``)."""
        if type(nbytes) is not int or nbytes <= 0:  # noqa: E721  (a positive int is its own size)
            nbytes = parse_size(nbytes, name="nbytes")
        if stream is None:
            stream = getattr(self._tls, "stream", 0)  # current_stream(), without the call
        elif isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise ValueError(f"stream must be a non-negative int (0 = default stream), got {stream!r}")
        if nbytes == 0:
            return Allocation(self, None, 0, stream)  # like PyTorch: size 0 skips the allocator
        if nbytes >= ONE_EXA_BYTES:
            raise SizeTooLargeError("CUDA out of memory. Tried to allocate more than 1EB memory.",
                                    requested_size=nbytes, device=self.device_index)
        # Frames are captured only when the allocator keeps them (c10 maybeGatherContext).
        context = (_capture_frames(_PACKAGE_DIR, _FRAME_LIMIT, 2) if self.record_frames
                   and self.allocator.record_context_ >= _tr.STATE else None)  # 2: capture, empty
        try:
            with self._lock:
                block = self.allocator.malloc(nbytes, stream, context)
        except _AllocatorOOM as exc:
            raise OutOfMemoryError.from_allocator(exc) from None
        except _AllocatorCudaError as exc:
            raise CudaError.from_allocator(exc) from None
        return Allocation(self, block, nbytes, stream)

    def free(self, allocation: Allocation) -> None:
        """Free ``allocation`` (same as ``allocation.free()``)."""
        self._check_mine(allocation)
        allocation.free()

    def _free_block(self, block) -> None:
        # Called only by Allocation.free: capture, this frame and that one are the kit's.
        context = (_capture_frames(_PACKAGE_DIR, _FRAME_LIMIT, 3) if self.record_frames
                   and self.allocator.record_context_ >= _tr.ALL else None)
        with self._lock:
            self.allocator.free(block, context)

    def _check_mine(self, allocation) -> None:
        if not isinstance(allocation, Allocation):
            raise TypeError(f"expected an Allocation from gpu.empty(), not {type(allocation).__name__}")
        if allocation._gpu is None:
            raise ValueError(f"the allocation at {allocation.address:#x} was already freed")
        if allocation._gpu is not self:
            raise ValueError("this allocation belongs to another device")

    def record_stream(self, allocation: Allocation, stream: int) -> None:
        """``tensor.record_stream(stream)``: on free, the block waits for ``stream``'s work."""
        self._check_mine(allocation)
        if allocation._block is not None:
            with self._lock:
                self.allocator.record_stream(allocation._block, stream)

    def launch(self, stream: int = 0) -> None:
        """Queue (simulated) kernel work on ``stream``: until ``synchronize()`` or
        ``stream_synchronize(stream)``, events recorded on it are not ready, so blocks freed after
        a ``record_stream(a, stream)`` stay pending free and are not reused (c10 ``process_events``
        stops at the first event not ready). No kernel runs; only the allocator sees the work."""
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise ValueError(f"stream must be a non-negative int (0 = default stream), got {stream!r}")
        with self._lock:
            self.allocator.busy_streams.add(stream)

    def stream_synchronize(self, stream: int) -> None:
        """``torch.cuda.Stream.synchronize()``: the work launched on ``stream`` is finished."""
        with self._lock:
            self.allocator.busy_streams.discard(stream)

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``: every stream's launched work is finished. (Blocks pending
        free are then reclaimed by the next allocation, as in PyTorch.)"""
        with self._lock:
            self.allocator.busy_streams.clear()

    # ------------------------------------------------------------------ torch.cuda memory API
    def memory_allocated(self) -> int:
        return self.allocator.stats.allocated_bytes[0].current

    def max_memory_allocated(self) -> int:
        return self.allocator.stats.allocated_bytes[0].peak

    def memory_reserved(self) -> int:
        return self.allocator.stats.reserved_bytes[0].current

    def max_memory_reserved(self) -> int:
        return self.allocator.stats.reserved_bytes[0].peak

    def memory_stats(self):
        return self.allocator.memory_stats()

    def memory_stats_as_nested_dict(self) -> dict:
        return self.allocator.memory_stats_as_nested_dict()

    def memory_summary(self, abbreviated: bool = False) -> str:
        return memory_summary(self.memory_stats(), device=self.device_index, abbreviated=abbreviated)

    def snapshot(self) -> dict:
        """``torch.cuda.memory._snapshot()``: segments, device_traces, allocator_settings."""
        snap = self.allocator.snapshot()
        snap["device_traces"] = [[] for _ in range(self.device_index)] + snap["device_traces"]
        if self.host_allocator.record_history:
            snap.update(self._host_snapshot())
        return snap

    def empty_cache(self) -> None:
        context = (_capture_frames(_PACKAGE_DIR, _FRAME_LIMIT, 2) if self.record_frames
                   and self.allocator.record_context_ >= _tr.ALL else None)
        with self._lock:
            self.allocator.empty_cache(context)

    def reset_peak_memory_stats(self) -> None:
        self.allocator.reset_peak_stats()

    def reset_accumulated_memory_stats(self) -> None:
        self.allocator.reset_accumulated_stats()

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.allocator.set_memory_fraction(fraction)

    def get_per_process_memory_fraction(self) -> float:
        return self.allocator.get_memory_fraction()

    def set_allocator_settings(self, conf: str) -> None:
        """``torch.cuda.memory._set_allocator_settings``: a bad string raises and changes nothing."""
        self.allocator.set_allocator_settings(conf)

    def allocator_settings(self) -> str:
        return self.allocator.config.last_allocator_settings

    def record_memory_history(self, enabled: str | None = "all", context: str | None = "all",
                              max_entries: int = DEFAULT_MAX_ENTRIES, skip_actions=None,
                              record_pinned_host_memory: bool | None = None) -> None:
        """``torch.cuda.memory._record_memory_history``: "all" keeps history, "state" keeps only
        the current state (a 1-entry buffer), None turns recording off and clears it;
        ``max_entries`` bounds the history (``DEFAULT_MAX_ENTRIES`` unless given);
        ``skip_actions`` (e.g. ["free_requested"]) leaves those actions out of the history."""
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
        if enabled == "state":
            max_entries = 1
        if record_pinned_host_memory is not None:
            self.host_allocator.record_history = bool(record_pinned_host_memory) and bool(enabled)
        self.allocator.record_history_settings(enabled is not None, context=context,
                                               max_entries=max_entries, skip_actions=skip_actions)

    def set_memory_metadata(self, metadata: str) -> None:
        """``torch.cuda.memory._set_memory_metadata``: tag the following trace entries."""
        self.allocator.set_memory_metadata(metadata)

    def mem_get_info(self) -> tuple:
        """(free, total) bytes of the device, like ``torch.cuda.mem_get_info``."""
        return self.allocator.driver.mem_get_info()

    def check_invariants(self) -> None:
        self.allocator.check_invariants()
