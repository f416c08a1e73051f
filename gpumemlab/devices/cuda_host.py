"""The pinned-host part of ``CudaGPU``: ``pin``, ``copy_``, ``host_memory_stats``,
``host_empty_cache`` and the host keys of ``snapshot()``, through the installed torch.

The same surface as the simulator's (devices/host_api.py), served by PyTorch's own
``CachingHostAllocator``: ``pin(nbytes)`` is ``torch.empty(nbytes, dtype=torch.uint8,
pin_memory=True)``; ``host_memory_stats()`` is ``torch.cuda.memory.host_memory_stats()``;
``host_empty_cache()`` is ``torch.accelerator.empty_host_cache()`` (torch 2.13 has no
``torch._C._host_emptyCache``; an older torch without the former uses the latter). The host part of a snapshot needs
``_record_memory_history(..., record_pinned_host_memory=True)``, which PyTorch 2.14 added
(pytorch/pytorch#182407; torch/cuda/memory.py ``_record_memory_history_impl``): on an older torch
(2.13, say) asking for it raises ``HostRecordingUnavailable`` with a sentence saying so, and
``host_features(torch)`` tells a lesson beforehand what this torch offers.

``PinnedAllocation.size`` is the block PyTorch's rounding gives (allocator/host/rounding.py,
with this process's pinned settings): the real allocator does not say which block it handed out.
"""
from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass

from gpumemlab.allocator import AllocatorConfig
from gpumemlab.allocator.host.rounding import host_round_size
from gpumemlab.units import format_size, parse_size


class HostRecordingUnavailable(RuntimeError):
    """The installed torch cannot do what was asked of the pinned host allocator."""


@dataclass(frozen=True)
class HostFeatures:
    """What the installed torch offers for pinned host memory; ``missing`` says why not."""
    torch_version: str
    stats: bool           # torch.cuda.memory.host_memory_stats
    empty_cache: str      # the function that empties the host cache ("" when none)
    recording: bool       # _record_memory_history(record_pinned_host_memory=...)

    @property
    def missing(self) -> str:
        if self.recording:
            return ""
        return (f"torch {self.torch_version} cannot record pinned host memory: its "
                f"torch.cuda.memory._record_memory_history has no record_pinned_host_memory "
                f"(PyTorch 2.14 added it), so the snapshot has no host_segments/host_traces; "
                f"gml.SimulatedGPU(record_pinned_host_memory=True) models them")


def _empty_cache_name(torch) -> str:
    if callable(getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)):
        return "torch.accelerator.empty_host_cache"
    if callable(getattr(getattr(torch, "_C", None), "_host_emptyCache", None)):
        return "torch._C._host_emptyCache"
    return ""


def host_features(torch) -> HostFeatures:
    """Read ``torch`` (the module) for its pinned host API; nothing is called."""
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    record = getattr(memory, "_record_memory_history", None)
    try:
        params = inspect.signature(record).parameters if record is not None else {}
    except (TypeError, ValueError):
        params = {}
    return HostFeatures(
        torch_version=str(getattr(torch, "__version__", "?")),
        stats=callable(getattr(memory, "host_memory_stats", None)),
        empty_cache=_empty_cache_name(torch),
        recording="record_pinned_host_memory" in params)


class CudaPinnedAllocation:
    """A real pinned uint8 CPU tensor of ``nbytes``; freed on ``free()`` or when the last
    reference goes (then PyTorch caches its block)."""

    __slots__ = ("tensor", "nbytes", "address", "size", "__weakref__")

    def __init__(self, tensor, nbytes, size):
        self.tensor, self.nbytes, self.size = tensor, nbytes, size
        self.address = tensor.data_ptr() if nbytes else 0

    @property
    def freed(self) -> bool:
        return self.tensor is None

    def free(self) -> None:
        if self.tensor is None:
            raise ValueError(f"double free: the pinned allocation at {self.address:#x} was "
                             "already freed")
        self.tensor = None

    def __repr__(self):
        if self.freed:
            return f"<CudaPinnedAllocation of {format_size(self.nbytes)} (freed)>"
        return (f"<CudaPinnedAllocation of {format_size(self.nbytes)} at {self.address:#x} "
                f"(pinned block {format_size(self.size)} by the rounding rule)>")


class CudaHostAPI:
    """Mixed into CudaGPU; needs ``self._torch``, ``self._stream(n)``, ``self._check_open()``
    and ``self.allocator_settings()``."""

    def _init_cuda_host(self, record_pinned_host_memory: bool) -> dict:
        """-> the extra keyword for _record_memory_history (empty when not asked for)."""
        self.host_features = host_features(self._torch)
        self._pinned = weakref.WeakSet()   # what close() frees
        self.host_recording = bool(record_pinned_host_memory)
        if not record_pinned_host_memory:
            return {}
        if not self.host_features.recording:
            raise HostRecordingUnavailable(self.host_features.missing)
        return {"record_pinned_host_memory": True}

    def pin(self, nbytes) -> CudaPinnedAllocation:
        """Pinned host memory of ``nbytes`` from PyTorch's CachingHostAllocator:
        ``torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)``."""
        self._check_open()
        if type(nbytes) is not int or nbytes <= 0:  # noqa: E721
            nbytes = parse_size(nbytes, name="nbytes")
        torch = self._torch
        t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        try:
            config = AllocatorConfig.parse(self.allocator_settings() or "")
        except Exception:   # settings the model does not parse: PyTorch's defaults
            config = AllocatorConfig()
        size = host_round_size(nbytes, config.pinned_max_round_threshold,
                               config.pinned_max_cached_size)
        a = CudaPinnedAllocation(t, nbytes, size)
        self._pinned.add(a)
        return a

    def copy_(self, dst, src, non_blocking: bool = False, stream: int = 0) -> None:
        """``dst.copy_(src, non_blocking=...)`` between a pinned and a device allocation, on
        ``stream``; PyTorch records the pinned block's event itself."""
        self._check_open()
        for a in (dst, src):
            if a.freed:
                raise ValueError(f"copy_ from or to a freed allocation at {a.address:#x}")
        if src.nbytes > dst.nbytes:
            raise ValueError(f"copy_ of {src.nbytes} bytes into {dst.nbytes}")
        torch = self._torch
        s = self._stream(stream)
        n = src.nbytes
        if s is None:
            dst.tensor[:n].copy_(src.tensor[:n], non_blocking=non_blocking)
        else:
            with torch.cuda.stream(s):
                dst.tensor[:n].copy_(src.tensor[:n], non_blocking=non_blocking)

    def _host_stats_fn(self):
        if not self.host_features.stats:
            raise HostRecordingUnavailable(
                f"torch {self.host_features.torch_version} has no "
                f"torch.cuda.memory.host_memory_stats()")
        return self._torch.cuda.memory.host_memory_stats

    def host_memory_stats(self):
        """``torch.cuda.memory.host_memory_stats()``."""
        return self._host_stats_fn()()

    def host_memory_stats_as_nested_dict(self) -> dict:
        """``torch.cuda.memory.host_memory_stats_as_nested_dict()``."""
        self._host_stats_fn()
        return self._torch.cuda.memory.host_memory_stats_as_nested_dict()

    def host_pinned_bytes(self) -> int:
        """Bytes PyTorch's host allocator has pinned now (``allocated_bytes.current``: blocks in
        use, cached or waiting for events)."""
        return int(self.host_memory_stats().get("allocated_bytes.current", 0))

    def host_empty_cache(self) -> None:
        """``torch.accelerator.empty_host_cache()``: give back the cached pinned blocks."""
        name = self.host_features.empty_cache
        if not name:
            raise HostRecordingUnavailable(
                f"torch {self.host_features.torch_version} has neither "
                f"torch.accelerator.empty_host_cache() nor torch._C._host_emptyCache()")
        if name == "torch.accelerator.empty_host_cache":
            self._torch.accelerator.empty_host_cache()
        else:
            self._torch._C._host_emptyCache()

    def reset_peak_host_memory_stats(self) -> None:
        self._torch.cuda.memory.reset_peak_host_memory_stats()

    def reset_accumulated_host_memory_stats(self) -> None:
        self._torch.cuda.memory.reset_accumulated_host_memory_stats()

    def _free_pinned(self) -> int:
        """Drop every live pinned allocation this device made (close()); -> how many."""
        live = [a for a in list(self._pinned) if not a.freed]
        for a in live:
            a.tensor = None
        return len(live)


__all__ = ["CudaHostAPI", "CudaPinnedAllocation", "HostFeatures", "HostRecordingUnavailable",
           "host_features"]
