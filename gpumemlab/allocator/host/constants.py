"""Constants and the source followed by the pinned host allocator model.

The model follows ``at::CachingHostAllocatorImpl`` in aten/src/ATen/core/CachingHostAllocator.h
exactly as torch 2.13.0 ships it (the wheel's ``torch/include/ATen/core/CachingHostAllocator.h``,
git cf30153c4c131c8164ee7798e5022d810682e2cb), and the CUDA specialisation
``CUDACachingHostAllocatorImpl`` in aten/src/ATen/cuda/CachingHostAllocator.cpp (the stored
revision 03258ab2aaee392cfb6772e9add73f1621d434d8, whose ``DECLARE_HOST_ALLOCATOR`` takes the
same four arguments as 2.13's header). docs/SOURCE_MAP.md maps each name to its C++ symbol.
"""

HOST_PYTORCH_REF = (
    "torch 2.13.0 (git cf30153c4c131c8164ee7798e5022d810682e2cb) aten/src/ATen/core/"
    "CachingHostAllocator.h as installed in torch/include; aten/src/ATen/cuda/"
    "CachingHostAllocator.cpp @ 03258ab2aaee392cfb6772e9add73f1621d434d8"
)

MAX_SIZE_INDEX = 64  # c10: MAX_SIZE_INDEX, one free list per power of two
RESERVE_PAGE = 4096  # PinnedReserveSegment::allocate rounds every carve to 4 KiB
PAGE_SIZE = 4096  # allocWithCudaHostRegister: pageSize = 1 << 12, the pages it pre-faults
HOST_DEVICE = -1  # the snapshot's "device" for host memory (it belongs to no GPU)
