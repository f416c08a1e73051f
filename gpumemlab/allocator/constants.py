"""Size constants of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

Each constant keeps its C++ name in a trailing comment so that grepping the real source finds
it. PYTORCH_REF names the source this model follows; docs/SOURCE_MAP.md maps every model name
to its c10 symbol.
"""

PYTORCH_REF = (
    "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @ 001074d25084fdb87a799823e395a50f5ec044d3 "
    "(2.4/2.5), with the late-2025 changes of c10/core/AllocatorConfig.cpp (2.9+) noted in SOURCE_MAP.md"
)

K_MIN_BLOCK_SIZE = 512  # c10: kMinBlockSize, all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1048576  # c10: kSmallSize, largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2097152  # c10: kSmallBuffer, "small" allocations are packed in 2 MiB blocks
K_LARGE_BUFFER = 20971520  # c10: kLargeBuffer, "large" allocations may be packed in 20 MiB blocks
K_MIN_LARGE_ALLOC = 10485760  # c10: kMinLargeAlloc, allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2097152  # c10: kRoundLarge, round up large allocations to 2 MiB
K_ROUNDUP_POWER2_INTERVALS = 16  # c10: kRoundUpPowerOfTwoIntervals (1 MiB .. 64 GiB buckets)
K_MB = 1048576  # c10: kMB
ONE_EXA_BYTES = 1152921504606846976  # c10: one_exa_bytes in NativeCachingAllocator::allocate
SIZE_MAX = 2**64 - 1  # std::numeric_limits<size_t>::max(), the "unlimited" max_split_size

# StatType indices (c10::CachingAllocator::StatType): AGGREGATE, SMALL_POOL, LARGE_POOL.
AGGREGATE = 0
SMALL_POOL = 1
LARGE_POOL = 2
STAT_TYPE_NAMES = ("all", "small_pool", "large_pool")
