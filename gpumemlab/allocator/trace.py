"""Allocator history: c10 ``TraceEntry`` and ``TraceEntryRingBuffer``.

Entries are kept as tuples (cheap on the hot path) and become PyTorch's trace dicts only when a
snapshot is taken. ``time_us`` comes from a logical clock (one tick per entry) so that the
simulator stays deterministic; PyTorch records epoch microseconds.
"""
from __future__ import annotations

import sys

# c10 TraceEntry::Action names, as they appear in snapshots.
ALLOC = "alloc"
FREE_REQUESTED = "free_requested"
FREE_COMPLETED = "free_completed"
SEGMENT_ALLOC = "segment_alloc"
SEGMENT_FREE = "segment_free"
SEGMENT_MAP = "segment_map"
SEGMENT_UNMAP = "segment_unmap"
SNAPSHOT = "snapshot"
OOM = "oom"
USER_DEFINED = "user_defined"

# RecordContext levels (c10::cuda::CUDACachingAllocator::RecordContext).
NEVER, STATE, ALLOC_CONTEXT, ALL = 0, 1, 2, 3
_CONTEXT_LEVELS = {None: NEVER, "state": STATE, "alloc": ALLOC_CONTEXT, "all": ALL}


# What _record_memory_history(skip_actions=...) may drop (segment_map/unmap cannot be skipped).
SKIPPABLE = frozenset((ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, OOM,
                       SNAPSHOT))


def context_level(name) -> int:
    try:
        return _CONTEXT_LEVELS[name]
    except KeyError:
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', not {name!r}") from None


class TraceRingBuffer:
    """Keeps at most ``max_entries`` entries, overwriting the oldest (c10 ring buffer)."""

    __slots__ = ("max_entries", "entries", "next")

    def __init__(self, max_entries: int = sys.maxsize):
        self.max_entries = max(1, max_entries)
        self.entries = []
        self.next = 0

    def set_max_entries(self, max_entries: int) -> None:
        self.max_entries = max(1, max_entries)

    def insert(self, entry) -> None:
        if len(self.entries) < self.max_entries:
            self.entries.append(entry)
        else:
            self.entries[self.next] = entry
            self.next += 1
            if self.next == self.max_entries:
                self.next = 0

    def get(self) -> list:
        """Entries oldest first."""
        return self.entries[self.next:] + self.entries[:self.next]

    def clear(self) -> None:
        self.entries = []
        self.next = 0

    def __len__(self):
        return len(self.entries)


def entry_to_dict(entry) -> dict:
    """One trace tuple as PyTorch's trace-entry dict."""
    action, addr, size, stream, time_us, frames, user_metadata, pool_id = entry
    d = {"action": action}
    d["device_free" if action == OOM else "addr"] = addr
    d["size"] = size
    d["stream"] = stream
    d["time_us"] = time_us
    d["compile_context"] = "N/A"  # newest PyTorch: torch.compile context, "N/A" outside it
    d["user_metadata"] = user_metadata
    d["pool_id"] = pool_id  # torch 2.13's TraceEntry docstring: the entry's memory pool
    if frames is not None:
        d["frames"] = list(frames)
    return d
