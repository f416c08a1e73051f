"""The allocator's history: c10 ``record_trace``, ``recordHistory`` and the user metadata of
``torch.cuda.memory._set_memory_metadata``.

Each event becomes one entry of a :class:`~gpumemlab.allocator.trace.TraceRingBuffer`; frames
are kept only at the ``record_context`` level that asks for them (c10 ``maybeGatherContext``).
"""
from __future__ import annotations

import sys

from . import trace as tr


class HistoryMixin:
    """The history part of ``DeviceCachingAllocator``; it owns the attributes below."""

    alloc_buffer: tr.TraceRingBuffer
    record_history: bool
    record_context_: int  # a RecordContext level: trace.NEVER .. trace.ALL
    clock: int  # logical time_us: one tick per recorded entry
    user_metadata: str  # c10: the thread-local metadata set by _set_memory_metadata
    skip_actions: frozenset  # actions _record_memory_history(skip_actions=...) drops

    def _init_history(self, enabled: bool, context, max_entries: int) -> None:
        self.alloc_buffer = tr.TraceRingBuffer(max_entries)
        self.record_history = False
        self.record_context_ = tr.NEVER
        self.clock = 0
        self.user_metadata = ""
        self.skip_actions = frozenset()
        self.record_history_settings(enabled, context=context, max_entries=max_entries)

    def _gather(self, level: int, context):
        """``maybeGatherContext``: keep the caller's frames only at this recording level."""
        return context if self.record_context_ >= level else None

    def record_trace(self, action, addr, size, stream, context, pool_id=(0, 0)) -> None:
        """c10 ``record_trace``; ``pool_id`` is the entry's memory pool (``owner_MempoolId``)."""
        if not self.record_history:
            return
        if self.skip_actions and action in self.skip_actions:
            return
        self.clock += 1
        frames = context if self.record_context_ >= tr.ALLOC_CONTEXT else None
        self.alloc_buffer.insert(action, addr, size, stream, self.clock, frames,
                                 self.user_metadata, pool_id)

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

    def set_memory_metadata(self, metadata: str) -> None:
        """``torch.cuda.memory._set_memory_metadata``: a string stored in every following trace
        entry's ``user_metadata`` ("" to stop)."""
        if not isinstance(metadata, str):
            raise TypeError(f"metadata must be a string, not {type(metadata).__name__}")
        self.user_metadata = metadata
