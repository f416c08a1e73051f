"""``gml.OutOfMemoryError``: the simulated GPU's OOM, catchable as ``torch.OutOfMemoryError``
(``torch.cuda.OutOfMemoryError``) when torch is installed, and always as ``RuntimeError``.

torch is imported only if it is installed and importable; the allocator package itself never
imports it.
"""
from __future__ import annotations

from gpumemlab.allocator.oom import OutOfMemoryError as _AllocatorOOM


def _torch_oom_base():
    try:
        import torch
    except Exception:  # torch missing or broken: the kit still works on the simulator
        return ()
    base = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (base,) if base is not None else ()


class OutOfMemoryError(*_torch_oom_base(), _AllocatorOOM):
    """CUDA out of memory on a simulated GPU, with PyTorch's exact message."""

    def __init__(self, message, **fields):
        _AllocatorOOM.__init__(self, message, **fields)

    @classmethod
    def from_allocator(cls, exc: _AllocatorOOM) -> "OutOfMemoryError":
        return cls(str(exc), requested_size=exc.requested_size, size=exc.size,
                   alloc_size=exc.alloc_size, device_free=exc.device_free,
                   device_total=exc.device_total, device=exc.device)
