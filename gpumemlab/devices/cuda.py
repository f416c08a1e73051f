"""``CudaGPU``: the SimulatedGPU interface over real ``torch.cuda`` memory, and ``device()``.

Follows torch.cuda's memory API (torch/cuda/memory.py): ``empty()`` allocates a real uint8
tensor through PyTorch's CUDA caching allocator; a budget caps the process with
``torch.cuda.set_per_process_memory_fraction`` so lessons run out of memory fast and never take
a shared GPU's memory; history is recorded (``torch.cuda.memory._record_memory_history``) so
``snapshot()`` is the real allocator's ``_snapshot()`` dict. Allocator settings change at run time
through ``torch.cuda.memory._set_allocator_settings`` where PyTorch allows it; ``backend`` is read
once at start-up, so changing it needs a kernel restart with ``PYTORCH_CUDA_ALLOC_CONF`` set.

Before it takes anything it checks that the budget fits the card and is free now
(``budget.decide_budget``): a budget larger than the card is refused (``BudgetError``), a card
too busy for it raises ``CardTooBusyError`` (``device()`` then says so and returns the simulator).
``budget_message`` says what it took.

Pinned host memory (``pin``, ``copy_``, ``host_memory_stats``, and ``host_segments`` /
``host_traces`` in ``snapshot()`` with ``record_pinned_host_memory=True``) goes through torch
where the installed torch has it (devices/cuda_host.py); where it does not, one line says so.

The fraction and the history are process-wide in PyTorch, so one CudaGPU is open at a time:
opening another closes the previous one. ``close()`` frees every allocation it made, empties the
cache, stops recording, lifts the cap, and returns a line saying so.
"""
from __future__ import annotations

import os
import sys
import weakref
from collections import OrderedDict

from gpumemlab.allocator import round_size
from gpumemlab.units import format_size, parse_size
from .budget import BudgetError, CardTooBusyError, decide_budget, fraction_for

from .simulated import SimulatedGPU
from .cuda_pools import CudaPoolsAPI
from .cuda_host import CudaHostAPI, HostRecordingUnavailable  # noqa: F401  (gml's name)

__all__ = ["CudaGPU", "CudaAllocation", "device", "cuda_available"]

_current = None          # weakref to the open CudaGPU


def cuda_available() -> bool:
    try:
        import torch
    except Exception:
        return False
    return bool(torch.cuda.is_available())


class CudaAllocation:
    """A real uint8 CUDA tensor of ``nbytes``; freed on ``free()`` or when the last reference goes."""

    __slots__ = ("tensor", "nbytes", "address", "stream", "__weakref__")

    def __init__(self, tensor, nbytes, stream):
        self.tensor, self.nbytes, self.stream = tensor, nbytes, stream
        self.address = tensor.data_ptr() if nbytes else 0

    @property
    def size(self) -> int:
        """The block size the caching allocator gives it (c10 ``round_size``)."""
        return round_size(self.nbytes) if self.nbytes else 0

    @property
    def freed(self) -> bool:
        return self.tensor is None

    def free(self) -> None:
        if self.tensor is None:
            raise ValueError(f"the allocation at {self.address:#x} was already freed")
        self.tensor = None

    def __repr__(self):
        state = "freed" if self.freed else "live"
        return f"<CudaAllocation {self.nbytes} bytes at {self.address:#x}, {state}>"


class CudaGPU(CudaPoolsAPI, CudaHostAPI):
    """Real GPU memory under a budget, with the SimulatedGPU interface (``kind == "cuda"``)."""

    kind = "cuda"

    def __init__(self, budget="4GiB", alloc_conf: str | None = None, *, device_index: int = 0,
                 record_history: bool = True, max_entries: int = sys.maxsize,
                 record_pinned_host_memory: bool = False):
        global _current
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available on this machine (torch.cuda.is_available() "
                               "is False): use gml.SimulatedGPU(...) or gml.device()")
        if not 0 <= device_index < torch.cuda.device_count():
            raise ValueError(f"device_index {device_index} out of range: "
                             f"{torch.cuda.device_count()} CUDA device(s)")
        self._torch = torch
        # before anything is taken or closed: a torch that cannot record the host says so here
        host_kwargs = self._init_cuda_host(record_pinned_host_memory and record_history)
        previous = _current() if _current is not None else None
        if previous is not None:
            previous.close()
        self.device_index = device_index
        self._dev = torch.device("cuda", device_index)
        props = torch.cuda.get_device_properties(device_index)
        self.name = props.name
        self.device_total_memory = int(props.total_memory)
        self.budget = parse_size(budget, name="budget")
        if self.budget > self.device_total_memory:     # refused before touching the card
            raise BudgetError(f"a budget of {format_size(self.budget)} is larger than "
                              f"{self.name}'s {format_size(self.device_total_memory)}: refused")
        torch.cuda.empty_cache()
        free, _total = torch.cuda.mem_get_info(device_index)
        decision = decide_budget(self.budget, self.device_total_memory, int(free),
                                 process_reserved=int(torch.cuda.memory_reserved(self._dev)),
                                 name=f"GPU {device_index} ({self.name})")
        if not decision.use_cuda:
            raise CardTooBusyError(decision.message)
        self.budget_message = decision.message
        self._allocations = weakref.WeakSet()
        self._streams = {}
        self._closed = False
        self.set_per_process_memory_fraction(1.0)
        if alloc_conf:
            self.set_allocator_settings(alloc_conf)
        if record_history:
            torch.cuda.memory._record_memory_history(enabled="all", context="all",
                                                     stacks="python", max_entries=max_entries,
                                                     device=device_index, **host_kwargs)
        self._recording = record_history
        _current = weakref.ref(self)

    # ------------------------------------------------------------------ identity
    @property
    def total_memory(self) -> int:
        """The budget: what this device may use, as the simulator's total_memory."""
        return self.budget

    @property
    def allocator(self):
        raise AttributeError("a CudaGPU's allocator is PyTorch's own C++ one; read snapshot() "
                             "or memory_stats() instead (gml.replay(gpu.snapshot()) models it)")

    def describe(self) -> str:
        settings = self.allocator_settings() or "default settings"
        return (f"CUDA GPU {self.device_index}: {self.name} "
                f"({format_size(self.device_total_memory)}), budget {format_size(self.budget)} "
                f"(real GPU memory through torch.cuda); allocator settings: {settings}")

    def __repr__(self):
        return f"<{self.describe()}>"

    def allocator_settings(self) -> str:
        settings = self._torch.cuda.memory._snapshot().get("allocator_settings") or {}
        return settings.get("PYTORCH_CUDA_ALLOC_CONF", "") or os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", "")

    # ------------------------------------------------------------------ allocation
    def _stream(self, stream):
        if stream == 0:
            return None
        if stream not in self._streams:
            self._streams[stream] = self._torch.cuda.Stream(device=self._dev)
        return self._streams[stream]

    def empty(self, nbytes, stream: int = 0) -> CudaAllocation:
        """Allocate ``nbytes`` of real GPU memory; raises ``torch.OutOfMemoryError``."""
        self._check_open()
        nbytes = parse_size(nbytes, name="nbytes")
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise ValueError(f"stream must be a non-negative int (0 = default stream), got {stream!r}")
        torch = self._torch
        s = self._stream(stream)
        if s is None:
            t = torch.empty(nbytes, dtype=torch.uint8, device=self._dev)
        else:
            with torch.cuda.stream(s):
                t = torch.empty(nbytes, dtype=torch.uint8, device=self._dev)
        a = CudaAllocation(t, nbytes, stream)
        self._allocations.add(a)
        return a

    def free(self, allocation: CudaAllocation) -> None:
        allocation.free()

    def record_stream(self, allocation: CudaAllocation, stream: int) -> None:
        s = self._stream(stream) or self._torch.cuda.default_stream(self._dev)
        allocation.tensor.record_stream(s)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self._dev)

    def launch(self, stream: int = 0, seconds: float = 0.2) -> None:
        """Queue real work on ``stream``: a kernel that spins for about ``seconds`` (torch's
        ``torch.cuda._sleep``), so events recorded there are not ready meanwhile."""
        torch = self._torch
        s = self._stream(stream) or torch.cuda.default_stream(self._dev)
        rate_khz = getattr(torch.cuda.get_device_properties(self._dev), "clock_rate", 1_500_000)
        with torch.cuda.stream(s):
            torch.cuda._sleep(int(seconds * rate_khz * 1000))

    def stream_synchronize(self, stream: int) -> None:
        s = self._stream(stream) or self._torch.cuda.default_stream(self._dev)
        s.synchronize()

    # ------------------------------------------------------------------ torch.cuda memory API
    def memory_allocated(self) -> int:
        return self._torch.cuda.memory_allocated(self._dev)

    def max_memory_allocated(self) -> int:
        return self._torch.cuda.max_memory_allocated(self._dev)

    def memory_reserved(self) -> int:
        return self._torch.cuda.memory_reserved(self._dev)

    def max_memory_reserved(self) -> int:
        return self._torch.cuda.max_memory_reserved(self._dev)

    def memory_stats(self):
        return OrderedDict(sorted(self._torch.cuda.memory_stats(self._dev).items()))

    def memory_summary(self, abbreviated: bool = False) -> str:
        return self._torch.cuda.memory_summary(self._dev, abbreviated=abbreviated)

    def snapshot(self) -> dict:
        """``torch.cuda.memory._snapshot()``, this device's segments and trace only; with
        ``record_pinned_host_memory=True`` (torch >= 2.14) torch's ``host_segments`` and
        ``host_traces`` as it wrote them (the process's pinned memory, not a device's)."""
        snap = self._torch.cuda.memory._snapshot()
        snap["segments"] = [s for s in snap["segments"] if s["device"] == self.device_index]
        return snap

    def memory_snapshot(self) -> list:
        return self.snapshot()["segments"]

    def mem_get_info(self) -> tuple:
        """(free, total) within the budget (the rest of the card is not ours to count)."""
        return max(self.budget - self.memory_reserved(), 0), self.budget

    def empty_cache(self) -> None:
        self._torch.cuda.empty_cache()

    def reset_peak_memory_stats(self) -> None:
        self._torch.cuda.reset_peak_memory_stats(self._dev)

    def reset_accumulated_memory_stats(self) -> None:
        self._torch.cuda.reset_accumulated_memory_stats(self._dev)

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """Cap at ``fraction`` of the budget (the simulator's meaning of total memory)."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be a number in [0, 1], got {fraction!r}")
        self._torch.cuda.set_per_process_memory_fraction(
            fraction_for(int(fraction * self.budget), self.device_total_memory), self._dev)

    def set_allocator_settings(self, settings: str) -> None:
        """``torch.cuda.memory._set_allocator_settings``; options PyTorch reads only at start-up
        (``backend``) raise with the restart instruction."""
        if "backend" in settings:
            raise RuntimeError(
                f"'{settings}' sets the allocator backend, which PyTorch reads once at start-up: "
                f"restart the kernel with PYTORCH_CUDA_ALLOC_CONF='{settings}' set in its "
                f"environment")
        try:
            self._torch.cuda.memory._set_allocator_settings(settings)
        except RuntimeError as exc:
            raise RuntimeError(f"PyTorch refused allocator settings {settings!r}: {exc}. If this "
                               f"option cannot change at run time, restart the kernel with "
                               f"PYTORCH_CUDA_ALLOC_CONF='{settings}'") from None

    # ------------------------------------------------------------------ release
    def _check_open(self):
        if self._closed:
            raise RuntimeError("this CudaGPU was closed (another one was opened, or close() "
                               "was called): make a new one")

    def close(self) -> str:
        """Free every allocation this device made, empty the cache, stop recording, lift the cap;
        return a line saying what was given back."""
        global _current
        if self._closed:
            return "this CudaGPU was already closed"
        self._closed = True
        live = [a for a in list(self._allocations) if not a.freed]
        for a in live:
            a.tensor = None
        pinned = self._free_pinned()
        self._streams.clear()
        torch = self._torch
        torch.cuda.synchronize(self._dev)
        reserved = torch.cuda.memory_reserved(self._dev)
        torch.cuda.empty_cache()
        returned = reserved - torch.cuda.memory_reserved(self._dev)
        if self._recording:
            torch.cuda.memory._record_memory_history(enabled=None, device=self.device_index)
        torch.cuda.set_per_process_memory_fraction(1.0, self._dev)
        if _current is not None and _current() is self:
            _current = None
        pinned_note = f" and {pinned} pinned host allocation(s)" if pinned else ""
        return (f"closed the CudaGPU: freed {len(live)} live allocation(s) of "
                f"{format_size(sum(a.nbytes for a in live))}{pinned_note}, returned {format_size(returned)} of "
                f"cached memory to the driver, lifted the {format_size(self.budget)} cap")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def device(kind: str = "auto", memory=None, alloc_conf: str | None = None, **kwargs):
    """A CudaGPU when CUDA is available, else a SimulatedGPU; ``GPUMEMLAB_DEVICE=sim|cuda``
    overrides ``kind="auto"``. ``memory`` is the CudaGPU budget (default 4 GiB) or the simulated
    card's size (default 24 GiB). ``repr()``/``describe()`` says in one line which it is. Chosen
    automatically, a CUDA card too busy for the budget prints why and gives a simulator of the
    budget's size; ``kind="cuda"`` raises ``CardTooBusyError`` instead."""
    if kind not in ("auto", "sim", "simulated", "cuda"):
        raise ValueError(f"kind must be 'auto', 'sim' or 'cuda', not {kind!r}")
    auto = kind == "auto"
    if auto:
        env = os.environ.get("GPUMEMLAB_DEVICE", "").strip().lower()
        if env and env not in ("sim", "simulated", "cuda", "auto"):
            raise ValueError(f"GPUMEMLAB_DEVICE must be 'sim' or 'cuda', not {env!r}")
        auto = not env or env == "auto"
        kind = env if not auto else ("cuda" if cuda_available() else "sim")
    if kind == "cuda":
        if not cuda_available():
            raise RuntimeError("a CUDA device was asked for (kind='cuda' or GPUMEMLAB_DEVICE=cuda) "
                               "but torch.cuda.is_available() is False")
        try:
            return CudaGPU(budget=memory or "4GiB", alloc_conf=alloc_conf, **kwargs)
        except CardTooBusyError as exc:
            if not auto:
                raise
            print(f"gpumemlab: {exc}")        # the one line a lesson shows before going on
            return SimulatedGPU(memory or "4GiB", alloc_conf=alloc_conf)
    return SimulatedGPU(memory or "24GiB", alloc_conf=alloc_conf, **kwargs)
