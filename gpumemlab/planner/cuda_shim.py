"""``torch.cuda`` answering from the simulated card while a script runs on fake CUDA tensors.

The queries profiling scripts make (``is_available``, ``device_count``, ``get_device_name``,
``get_device_properties``, ``synchronize``, ``memory_allocated``, ``max_memory_allocated``,
``memory_reserved``, ``max_memory_reserved``, ``reset_peak_memory_stats``, ``empty_cache``,
``mem_get_info``, ``memory_stats``, ``memory._record_memory_history``, ``memory._dump_snapshot``,
``memory._snapshot``), timing events (``Event``: the host's time
between its records, no kernels ran), NVTX ranges
(no-ops), the CUDA runtime's profiler switches (``cudart().cudaProfilerStart/Stop``,
``torch.cuda.profiler.start``/``stop``/``profile``: cudaSuccess, there is nothing to profile) and a DataLoader's pinning thread (the batch goes on unpinned) are replaced for the duration of ``cuda_shim(card)``, in both ``torch.cuda`` and
``torch.cuda.memory``, and restored after. Each memory answer first feeds the card everything the
capture recorded so far (``LiveCard.sync``).
"""
from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace

__all__ = ["cuda_shim", "DEVICE_NAME"]

DEVICE_NAME = "gpumemlab simulated GPU"


class _Event:
    """``torch.cuda.Event``: no kernel runs, so there is no GPU time to measure; an interval is the
    host's wall-clock time between the two ``record`` calls (what the step took on fake tensors,
    as ``time.time()`` differences are), never 0 for two records, which scripts divide by
    (throughput, speed-ups)."""

    def __init__(self, *args, **kwargs):
        self._at = None

    def record(self, *args, **kwargs):
        self._at = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, *args, **kwargs):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        if self._at is None or other._at is None:
            return 0.0
        return max((other._at - self._at) * 1000.0, 1e-6)


class _Stream(_Event):
    def wait_stream(self, *args, **kwargs):
        pass

    def wait_event(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextlib.contextmanager
def _range(*args, **kwargs):
    yield


class _CudaRuntime:
    """``torch.cuda.cudart()``: a CPU-only torch has no CUDA runtime module (it returns None);
    profiling scripts switch an external profiler (nsys, ncu) on after their warm-up steps, which
    here has nothing to record, so each switch answers cudaSuccess (0)."""

    class cudaError:                    # noqa: N801 (the runtime's name)
        success = 0

    def cudaProfilerStart(self):        # noqa: N802
        return 0

    def cudaProfilerStop(self):         # noqa: N802
        return 0


def _check_error(res):
    """``torch.cuda.check_error`` against the stand-in runtime: 0 is success."""
    if res != 0:
        raise RuntimeError(f"CUDA error {res}")


def _answers(card, capability=(8, 0)):
    gpu = card.gpu

    def synced(fn):
        def call(*args, **kwargs):
            card.sync()
            return fn()
        return call

    def reset_peak(*args, **kwargs):
        card.sync()
        gpu.reset_peak_memory_stats()

    def empty_cache(*args, **kwargs):
        card.sync()
        gpu.empty_cache()

    props = SimpleNamespace(name=DEVICE_NAME, total_memory=gpu.total_memory, major=capability[0],
                            minor=capability[1], multi_processor_count=108, is_integrated=False,
                            is_multi_gpu_board=False, L2_cache_size=40 << 20)
    memory = {
        "memory_allocated": synced(gpu.memory_allocated),
        "max_memory_allocated": synced(gpu.max_memory_allocated),
        "memory_reserved": synced(gpu.memory_reserved),
        "max_memory_reserved": synced(gpu.max_memory_reserved),
        "memory_cached": synced(gpu.memory_reserved),
        "reset_peak_memory_stats": reset_peak, "reset_max_memory_allocated": reset_peak,
        "reset_accumulated_memory_stats": lambda *a, **k: gpu.reset_accumulated_memory_stats(),
        "empty_cache": empty_cache,
        "mem_get_info": synced(gpu.mem_get_info),
        "memory_stats": synced(gpu.memory_stats),
        "memory_summary": lambda *a, **k: (card.sync(), gpu.memory_summary())[1],
        "_record_memory_history": card.record_memory_history,
        "_dump_snapshot": lambda filename="dump_snapshot.pickle": card.dump_snapshot(filename),
        "_snapshot": lambda *a, **k: (card.sync(), gpu.snapshot())[1],
        "_set_memory_metadata": lambda m: gpu.set_memory_metadata(m),
    }
    cuda = dict(memory)
    cuda.update({
        "is_available": lambda: True, "is_initialized": lambda: True, "init": lambda: None,
        "device_count": lambda: 1, "current_device": lambda: 0,
        "set_device": lambda *a, **k: None,
        "get_device_name": lambda *a, **k: DEVICE_NAME,
        "get_device_properties": lambda *a, **k: props,
        "get_device_capability": lambda *a, **k: capability,
        "is_bf16_supported": lambda *a, **k: True,
        "synchronize": lambda *a, **k: card.sync(),
        "manual_seed": lambda *a, **k: None, "manual_seed_all": lambda *a, **k: None,
        "seed": lambda: None, "seed_all": lambda: None,
        "Event": _Event, "Stream": _Stream,
        "current_stream": lambda *a, **k: _Stream(), "default_stream": lambda *a, **k: _Stream(),
        "stream": lambda *a, **k: _range(),
        "cudart": lambda: _RUNTIME, "check_error": _check_error,
    })
    return cuda, memory


@contextlib.contextmanager
def cuda_shim(card, capability=(8, 0)):
    import torch
    import torch.cuda.memory
    cuda, memory = _answers(card, capability)
    saved = []
    targets = [(torch.cuda, cuda), (torch.cuda.memory, memory)]
    try:
        import torch.cuda.nvtx as nvtx
        targets.append((nvtx, {"range_push": lambda *a, **k: 0, "range_pop": lambda *a, **k: 0,
                               "range": _range, "mark": lambda *a, **k: None}))
    except ImportError:
        pass
    import torch.cuda.profiler as profiler     # it bound cudart and check_error at its import
    targets.append((profiler, {"cudart": lambda: _RUNTIME, "check_error": _check_error}))
    # a DataLoader(pin_memory=True) with workers pins in a thread of its own, where no dispatch
    # mode is active, so torch's page-locked allocator (CUDA's) would be asked for real: host
    # memory is not the card's, so the batch goes on unpinned
    import torch.utils.data._utils.pin_memory as pinning
    targets.append((pinning, {"pin_memory": lambda data, device=None: data}))
    for module, names in targets:
        for name, value in names.items():
            saved.append((module, name, module.__dict__.get(name, _MISSING)))
            setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, old in reversed(saved):
            if old is _MISSING:
                delattr(module, name)
            else:
                setattr(module, name, old)


_MISSING = object()
_RUNTIME = _CudaRuntime()
