"""``gml.OutOfMemoryError``: the simulated GPU's OOM, catchable as ``torch.OutOfMemoryError``
(``torch.cuda.OutOfMemoryError``) when torch is installed, and always as ``RuntimeError``; and
``CudaError``, a failed CUDA call, catchable as ``torch.AcceleratorError`` (what PyTorch raises
for a failed ``C10_CUDA_CHECK``) when torch has it, and always as ``RuntimeError``.

torch is imported only if it is installed and importable; the allocator package itself never
imports it.
"""
from __future__ import annotations

from gpumemlab.allocator.driver import CudaError as _AllocatorCudaError
from gpumemlab.allocator.oom import OutOfMemoryError as _AllocatorOOM


def _torch_base(*names):
    """The first of torch's exception classes ``names`` ("cuda.X" looks in torch.cuda), as a
    1-tuple of bases, or () without torch."""
    try:
        import torch
    except Exception:  # torch missing or broken: the kit still works on the simulator
        return ()
    for name in names:
        owner = torch.cuda if name.startswith("cuda.") else torch
        base = getattr(owner, name.rpartition(".")[2], None)
        if base is not None:
            return (base,)
    return ()


def _torch_oom_base():
    return _torch_base("OutOfMemoryError", "cuda.OutOfMemoryError")


class OutOfMemoryError(*_torch_oom_base(), _AllocatorOOM):
    """CUDA out of memory on a simulated GPU, with PyTorch's exact message."""

    def __init__(self, message, **fields):
        _AllocatorOOM.__init__(self, message, **fields)

    @classmethod
    def from_allocator(cls, exc: _AllocatorOOM) -> "OutOfMemoryError":
        return cls(str(exc), requested_size=exc.requested_size, size=exc.size,
                   alloc_size=exc.alloc_size, device_free=exc.device_free,
                   device_total=exc.device_total, device=exc.device)


class CudaError(*_torch_base("AcceleratorError"), _AllocatorCudaError):
    """A simulated CUDA call failed (e.g. cudaFree of an address inside a segment)."""

    def __init__(self, error: str, message: str):
        RuntimeError.__init__(self, message)
        self.error = error

    @classmethod
    def from_allocator(cls, exc: _AllocatorCudaError) -> "CudaError":
        return cls(exc.error, str(exc))
