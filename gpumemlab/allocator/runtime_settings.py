"""Run-time settings of the allocator: history recording (c10 ``recordHistory``), allocator
settings strings (``torch.cuda.memory._set_allocator_settings``) and the per-process memory
fraction (c10 ``setMemoryFraction``, with the newest releases' optional limit).
"""
from __future__ import annotations

import sys

from . import trace as tr


class SettingsMixin:
    def set_memory_metadata(self, metadata: str) -> None:
        """``torch.cuda.memory._set_memory_metadata``: a string stored in every following trace
        entry's ``user_metadata`` ("" to stop)."""
        if not isinstance(metadata, str):
            raise TypeError(f"metadata must be a string, not {type(metadata).__name__}")
        self.user_metadata = metadata

    @property
    def total_memory(self) -> int:
        return self.driver.total_memory

    def record_history_settings(self, enabled: bool, context: str | None = "all",
                                max_entries: int = sys.maxsize, skip_actions=None) -> None:
        """c10 ``recordHistory``; turning it off clears the history. ``skip_actions`` lists trace
        actions not to record (newest PyTorch; segment_map/segment_unmap cannot be skipped)."""
        skip = frozenset(skip_actions or ())
        unknown = sorted(skip - tr.SKIPPABLE)
        if unknown:
            raise ValueError(f"skip_actions: unknown or unskippable action(s) {unknown}; "
                             f"choose from {sorted(tr.SKIPPABLE)}")
        self.skip_actions = skip
        self.record_history = bool(enabled)
        self.alloc_buffer.set_max_entries(max_entries)
        self.record_context_ = tr.context_level(context) if enabled else tr.NEVER
        if not enabled:
            self.alloc_buffer.clear()

    def set_allocator_settings(self, env: str) -> None:
        """``torch.cuda.memory._set_allocator_settings``: parse onto the current settings.

        As in c10, ``memory_stats()["max_split_size"]`` keeps the value the allocator was built
        with, and the oversize counters use whatever threshold is in force at each event (so
        they are only exact while max_split_size is unchanged).
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

