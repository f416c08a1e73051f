"""The few caching-allocator rules a snapshot reader needs, as pure functions.

Views and metrics read snapshot dicts only and never reach into the allocator, yet to say
"would a 2 GiB request fit here?" or "how big was the block this `alloc` entry carved?" they
need PyTorch's size arithmetic. These follow c10/cuda/CUDACachingAllocator.cpp
(``DeviceCachingAllocator::round_size``, ``get_pool``, ``get_allocation_size``,
``should_split``, ``roundup_power2_next_division``) and read their settings from a snapshot's
``allocator_settings`` dict, so a real recording made under ``roundup_power2_divisions`` or
``max_split_size_mb`` is read with its own rules. See docs/ALLOCATOR.md#sizes-and-pools.

The arithmetic itself is the allocator model's (``gpumemlab.allocator.rounding``, standard
library only): views share the model's pure size functions but never its state.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.allocator.constants import K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_SMALL_SIZE
from gpumemlab.allocator.constants import SIZE_MAX as _UNLIMITED
from gpumemlab.allocator.rounding import get_allocation_size, is_small
from gpumemlab.allocator.rounding import round_size as _round_size


@dataclass(frozen=True)
class Rules:
    """The allocator settings that change size arithmetic, read from ``allocator_settings``.

    ``divisions`` holds the 16 ``roundup_power2_divisions`` buckets (1 MiB .. 32 GiB starts);
    ``max_split_size`` is in bytes (unlimited by default); ``expandable`` is
    ``expandable_segments``.
    """

    divisions: tuple = (0,) * 16
    max_split_size: int = _UNLIMITED
    expandable: bool = False

    @classmethod
    def from_settings(cls, settings) -> "Rules":
        """Read a snapshot's ``allocator_settings`` (absent or partial dicts give defaults)."""
        if not settings:
            return cls()
        if not isinstance(settings, dict):
            raise TypeError(f"allocator_settings must be a dict, not {type(settings).__name__}")
        divisions = settings.get("roundup_power2_divisions") or (0,) * 16
        if isinstance(divisions, dict):
            # keyed by the MB start of each bucket: "1", "2", "4", ... "32768"
            divisions = tuple(int(divisions.get(str(1 << i), 0)) for i in range(16))
        elif isinstance(divisions, int):
            divisions = (divisions,) * 16
        else:
            divisions = tuple(int(d) for d in divisions)[:16]
            divisions += (0,) * (16 - len(divisions))
        max_split = settings.get("max_split_size", -1)
        max_split = _UNLIMITED if max_split is None or int(max_split) < 0 else int(max_split)
        return cls(divisions=divisions, max_split_size=max_split,
                   expandable=bool(settings.get("expandable_segments", False)))

    def round_size(self, size: int) -> int:
        """c10 ``round_size``: at least 512, then 512-multiples or a power-of-2 division."""
        return _round_size(size, self)

    def roundup_power2_divisions(self, size: int) -> int:
        """The divisions of ``size``'s bucket (the query ``round_size`` makes of its config)."""
        return self.divisions[min(max(size.bit_length() - 1 - 20, 0), 15)]

    @staticmethod
    def pool(rounded_size: int) -> str:
        """c10 ``get_pool``: 'small' for rounded sizes up to 1 MiB, else 'large'."""
        return "small" if is_small(rounded_size) else "large"

    @staticmethod
    def allocation_size(rounded_size: int) -> int:
        """c10 ``get_allocation_size``: the cudaMalloc size a miss of this rounded size asks for."""
        return get_allocation_size(rounded_size)

    def should_split(self, pool: str, block_size: int, rounded_size: int) -> bool:
        """c10 ``should_split``: whether a free block of ``block_size`` is cut for the request."""
        remaining = block_size - rounded_size
        if pool == "small" or self.expandable:
            return remaining >= K_MIN_BLOCK_SIZE
        return rounded_size < self.max_split_size and remaining > K_SMALL_SIZE

    def block_fits(self, block_size: int, rounded_size: int) -> bool:
        """c10 ``get_free_block``'s size tests on one candidate (oversize rules included)."""
        if block_size < rounded_size:
            return False
        if rounded_size < self.max_split_size <= block_size:
            return False  # a normal request never takes an oversize block
        if rounded_size >= self.max_split_size and block_size >= rounded_size + K_LARGE_BUFFER:
            return False
        return True

