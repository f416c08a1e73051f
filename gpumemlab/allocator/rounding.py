"""Size arithmetic of the caching allocator: ``round_size``, ``roundup_power2_next_division``,
``get_allocation_size`` (static members of c10's ``DeviceCachingAllocator``) and the pool choice."""
from __future__ import annotations

from .constants import (K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE,
                        K_ROUNDUP_POWER2_INTERVALS, K_SMALL_BUFFER, K_SMALL_SIZE)


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of 2.

    1200 with 4 divisions lies in [1024, 2048), whose steps are 1024, 1280, 1536, 1792: 1280.
    """
    if size & (size - 1) == 0:
        return size
    if divisions < 2:
        raise ValueError("Only 2 or more divisions are supported")
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def roundup_power2_bucket(size: int) -> int:
    """Which ``roundup_power2_divisions`` interval ``size`` falls in: floor(log2(size)) - 20
    (1 MiB is interval 0), clamped to 0..15."""
    return max(0, min(size.bit_length() - 1 - 20, K_ROUNDUP_POWER2_INTERVALS - 1))


def round_size(size: int, config=None) -> int:
    """The block size the allocator hands out for a request of ``size`` bytes.

    Under 512 B: 512. With ``roundup_power2_divisions`` set for the size's bucket (and the size
    above 512 * divisions): the next power-of-2 division. Otherwise: a multiple of 512.
    """
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    # config.any_roundup: some interval has divisions (else the lookup is skipped)
    divisions = (config.roundup_power2_divisions(size)
                 if config is not None and config.any_roundup else 0)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def get_allocation_size(size: int, large_segment_size: int = K_LARGE_BUFFER) -> int:
    """The segment size cudaMalloc'd for a (rounded) request that no cached block fits:
    2 MiB for small requests, the large segment size (20 MiB unless ``large_segment_size_mb``)
    for 1-10 MiB, else the size rounded up to 2 MiB."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return large_segment_size
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


def is_small(size: int) -> bool:
    """``get_pool``'s test: a rounded size of at most 1 MiB goes to the small pool."""
    return size <= K_SMALL_SIZE
