"""Run-time settings of the allocator: allocator settings strings
(``torch.cuda.memory._set_allocator_settings``) and the per-process memory fraction (c10
``setMemoryFraction``, with the newest releases' optional limit).
"""
from __future__ import annotations

from .config import AllocatorConfig
from .driver import CudaDriver


class SettingsMixin:
    """The settings part of ``DeviceCachingAllocator``."""

    # Owned by this part:
    allowed_memory_maximum: int | None  # no limit is None (newest c10: std::optional)
    oversize_stats_exact: bool  # False once max_split_size changed at run time
    # Owned by the allocator core (caching_allocator.py):
    config: AllocatorConfig
    driver: CudaDriver

    def _init_settings(self) -> None:
        self.allowed_memory_maximum = None
        self.oversize_stats_exact = True
        # The per_process_memory_fraction setting is read once, when the allocator is built.
        self.set_memory_fraction(self.config.per_process_memory_fraction)

    @property
    def total_memory(self) -> int:
        return self.driver.total_memory

    def set_allocator_settings(self, env: str) -> None:
        """``torch.cuda.memory._set_allocator_settings``: parse onto the current settings.

        As in c10, ``memory_stats()["max_split_size"]`` keeps the value the allocator was built
        with, and the oversize counters use whatever threshold is in force at each event (so
        they are only exact while max_split_size is unchanged). Cached blocks are left as they
        are: lowering ``max_split_size`` can leave split blocks at or above the new threshold,
        which ``release_available_cached_blocks`` then hands to cudaFree (see ``release.py``).
        """
        before = self.config.max_split_size
        self.config.apply(env)
        if self.config.max_split_size != before:
            self.oversize_stats_exact = False

    def set_memory_fraction(self, fraction: float) -> None:
        """c10 ``setMemoryFraction``: cap reserved memory at ``fraction`` of the device.

        As in newest PyTorch, a fraction of 1.0 removes the limit (and with it garbage
        collection); below 1.0 the limit is ``fraction * total_memory``.
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if not 0 <= fraction <= 1:
            raise ValueError(f"invalid fraction:{fraction}. Please set within [0, 1].")
        if fraction < 1.0:
            self.allowed_memory_maximum = int(fraction * self.driver.total_memory)
        else:
            self.allowed_memory_maximum = None

    def get_memory_fraction(self) -> float:
        if self.allowed_memory_maximum is None:
            return 1.0
        return self.allowed_memory_maximum / self.driver.total_memory

    @property
    def set_fraction(self) -> bool:
        """Whether a memory limit is in force (c10 2.4's ``set_fraction``)."""
        return self.allowed_memory_maximum is not None

    def _gc_enabled(self) -> bool:
        return (self.allowed_memory_maximum is not None
                and self.config.garbage_collection_threshold > 0.0)
