"""The few caching-allocator rules a snapshot reader needs, as pure functions.

Views and metrics read snapshot dicts only and never reach into the allocator, yet to say
"would a 2 GiB request fit here?" or "how big was the block this `alloc` entry carved?" they
need PyTorch's size arithmetic. These follow c10/cuda/CUDACachingAllocator.cpp
(``DeviceCachingAllocator::round_size``, ``get_pool``, ``get_allocation_size``,
``should_split``, ``roundup_power2_next_division``) and read their settings from a snapshot's
``allocator_settings`` dict, so a real recording made under ``roundup_power2_divisions`` or
``max_split_size_mb`` is read with its own rules. See docs/ALLOCATOR.md#sizes-and-pools.

The rules themselves are the allocator model's (``gpumemlab.allocator.rounding`` and
``gpumemlab.allocator.fit``, standard library only): views share the model's pure functions but
never its state.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.allocator.config import AllocatorConfig, recorded_conf
from gpumemlab.allocator.constants import K_LARGE_BUFFER, K_SMALL_BUFFER
from gpumemlab.allocator.constants import SIZE_MAX as _UNLIMITED
from gpumemlab.allocator.fit import oversize_allows
from gpumemlab.allocator.fit import should_split as _should_split
from gpumemlab.allocator.rounding import get_allocation_size, is_small, roundup_power2_bucket
from gpumemlab.allocator.rounding import round_size as _round_size


@dataclass(frozen=True)
class Rules:
    """The allocator settings that change size arithmetic, read from ``allocator_settings``.

    ``divisions`` holds the 16 ``roundup_power2_divisions`` buckets (1 MiB .. 32 GiB starts);
    ``max_split_size`` is in bytes (unlimited by default); ``expandable`` is
    ``expandable_segments``; ``max_non_split_rounding_size`` and ``large_segment_size`` (bytes)
    are not in the dict, so they come from the recorded settings string
    (``max_non_split_rounding_mb``, ``large_segment_size_mb``; 20 MiB by default). All of
    them are read as ``config.recorded_conf`` reads them for replay.
    """

    divisions: tuple = (0,) * 16
    max_split_size: int = _UNLIMITED
    expandable: bool = False
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    large_segment_size: int = K_LARGE_BUFFER

    @property
    def expandable_segments(self) -> bool:
        return self.expandable

    @property
    def any_roundup(self) -> bool:
        return any(d > 1 for d in self.divisions)

    @classmethod
    def from_settings(cls, settings) -> "Rules":
        """Read a snapshot's ``allocator_settings`` (absent or partial dicts give defaults)
        through ``config.recorded_conf``, the reader replay uses too: the recorded fields and
        string decide the rules alike everywhere."""
        if not settings:
            return cls()
        if not isinstance(settings, dict):
            raise TypeError(f"allocator_settings must be a dict, not {type(settings).__name__}")
        config = AllocatorConfig.parse(recorded_conf(settings))
        return cls(divisions=tuple(config.roundup_power2_divisions_),
                   max_split_size=config.max_split_size,
                   expandable=config.expandable_segments,
                   max_non_split_rounding_size=config.max_non_split_rounding_size,
                   large_segment_size=config.large_segment_size)

    def round_size(self, size: int) -> int:
        """c10 ``round_size``: at least 512, then 512-multiples or a power-of-2 division."""
        return _round_size(size, self)

    def roundup_power2_divisions(self, size: int) -> int:
        """The divisions of ``size``'s bucket (the query ``round_size`` makes of its config)."""
        return self.divisions[roundup_power2_bucket(size)]

    @staticmethod
    def pool(rounded_size: int) -> str:
        """c10 ``get_pool``: 'small' for rounded sizes up to 1 MiB, else 'large'."""
        return "small" if is_small(rounded_size) else "large"

    def allocation_size(self, rounded_size: int) -> int:
        """c10 ``get_allocation_size``: the cudaMalloc size a miss of this rounded size asks for."""
        return get_allocation_size(rounded_size, self.large_segment_size)

    def page_size(self, pool: str) -> int:
        """The pages an expandable segment of ``pool`` maps (c10 ``ExpandableSegment``)."""
        return K_SMALL_BUFFER if pool == "small" else self.large_segment_size

    def should_split(self, pool: str, block_size: int, rounded_size: int) -> bool:
        """c10 ``should_split``: whether a free block of ``block_size`` is cut for the request."""
        return _should_split(pool == "small", block_size, rounded_size, self)

    def block_fits(self, block_size: int, rounded_size: int) -> bool:
        """c10 ``get_free_block``'s size tests on one candidate (oversize rules included)."""
        return block_size >= rounded_size and oversize_allows(block_size, rounded_size, self)
