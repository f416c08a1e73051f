"""The out-of-memory error and its message, word for word as c10's ``DeviceCachingAllocator::malloc``
builds it (``TORCH_CHECK_WITH(OutOfMemoryError, ...)``)."""
from __future__ import annotations

from .sizes import format_size

# The newest releases' link; 2.4-era releases said
# https://pytorch.org/docs/stable/notes/cuda.html#environment-variables
DOCS_URL = ("https://docs.pytorch.org/docs/stable/notes/cuda.html"
            "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf")


class OutOfMemoryError(RuntimeError):
    """The simulated allocator could not find or create a block (``torch.OutOfMemoryError``).

    Attributes: ``requested_size`` (the caller's bytes), ``size`` (rounded), ``alloc_size``
    (the segment that could not be created), ``device_free``, ``device_total``.
    """

    def __init__(self, message, *, requested_size=0, size=0, alloc_size=0, device_free=0,
                 device_total=0, device=0):
        super().__init__(message)
        self.requested_size = requested_size
        self.size = size
        self.alloc_size = alloc_size
        self.device_free = device_free
        self.device_total = device_total
        self.device = device


def oom_message(*, alloc_size, device, device_total, device_free, allowed_info, proc_info,
                allocated_bytes, reserved_bytes, allocated_in_private_pools=0) -> str:
    private_pool_msg = ""
    if allocated_in_private_pools > 0:
        private_pool_msg = ("with " + format_size(allocated_in_private_pools)
                            + " allocated in private pools (e.g., CUDA Graphs), ")
    return (
        "CUDA out of memory. Tried to allocate " + format_size(alloc_size)
        + ". GPU " + str(device) + " has a total capacity of " + format_size(device_total)
        + " of which " + format_size(device_free) + " is free. " + proc_info + allowed_info
        + "Of the allocated memory " + format_size(allocated_bytes + allocated_in_private_pools)
        + " is allocated by PyTorch, " + private_pool_msg + "and "
        + format_size(reserved_bytes - allocated_bytes - allocated_in_private_pools)
        + " is reserved by PyTorch but unallocated."
        + " If reserved but unallocated memory is large try setting"
        + " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
        + " fragmentation.  See documentation for Memory Management "
        + " (" + DOCS_URL + ")"
    )


EXA_MESSAGE = "CUDA out of memory. Tried to allocate more than 1EB memory."
