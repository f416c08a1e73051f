"""How many bytes a pinned request really pins: ``CachingHostAllocatorImpl::allocate``'s
``roundSize`` and ``size_index`` (torch 2.13).

A request is rounded up to the next power of two (``c10::llvm::PowerOf2Ceil``) only when it is at
most ``pinned_max_round_threshold`` *and* at most ``pinned_max_cached_size``; above either it is
pinned at its exact size. Free lists are indexed by ``Log2_64_Ceil`` of the size, so an
unrounded block shares its list with every size in the same power-of-two bucket.
"""
from __future__ import annotations

from ..constants import SIZE_MAX
from .constants import RESERVE_PAGE


def power_of_2_ceil(n: int) -> int:
    """``c10::llvm::PowerOf2Ceil``: the smallest power of two >= n (0 stays 0)."""
    if n <= 0:
        return 0
    return 1 << (n - 1).bit_length()


def size_index(size: int) -> int:
    """``CachingHostAllocatorImpl::size_index`` = ``Log2_64_Ceil(size)`` (0 for size 1)."""
    return (size - 1).bit_length() if size > 1 else 0


def host_round_size(size: int, round_threshold: int = SIZE_MAX,
                    max_cached_size: int = SIZE_MAX) -> int:
    """The block size ``allocate(size)`` asks for (``roundSize``)."""
    if size <= round_threshold and size <= max_cached_size:
        return power_of_2_ceil(size)
    return size


def reserve_carve(size: int) -> int:
    """Bytes ``PinnedReserveSegment::allocate`` takes for a block: rounded up to 4 KiB."""
    return (size + RESERVE_PAGE - 1) & ~(RESERVE_PAGE - 1)


def pinned_bytes(size: int, config=None) -> int:
    """What a request of ``size`` bytes pins under ``config`` (an AllocatorConfig, or None for
    the defaults): the block size ``host_round_size`` gives."""
    if config is None:
        return host_round_size(size)
    return host_round_size(size, config.pinned_max_round_threshold, config.pinned_max_cached_size)
