"""Allocator history: c10 ``TraceEntry`` and ``TraceEntryRingBuffer``.

Entries are kept column by column (one list per field: no object per entry, so a long history
gives the garbage collector nothing to scan) and become PyTorch's trace dicts only when a
snapshot is taken. ``time_us`` comes from a logical clock (one tick per entry) so that the
simulator stays deterministic; PyTorch records epoch microseconds.
"""
from __future__ import annotations

import sys

from .frames import frame_dicts

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
# The action names a snapshot file's trace entries carry (torch/csrc/cuda/memory_snapshot.cpp's
# action_to_str: USER_DEFINED is written "annotate"); the one list readers check against.
TRACE_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "snapshot", "oom", "annotate")

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


FIELDS = ("action", "addr", "size", "stream", "time_us", "frames", "user_metadata", "pool_id")


class TraceRingBuffer:
    """Keeps at most ``max_entries`` entries, overwriting the oldest (c10 ring buffer)."""

    __slots__ = ("max_entries", "columns", "next")

    def __init__(self, max_entries: int = sys.maxsize):
        self.max_entries = max(1, max_entries)
        self.columns = tuple([] for _ in FIELDS)
        self.next = 0

    def set_max_entries(self, max_entries: int) -> None:
        self.max_entries = max(1, max_entries)

    def insert(self, action, addr, size, stream, time_us, frames, user_metadata,
               pool_id) -> None:
        c = self.columns
        if len(c[0]) < self.max_entries:
            c[0].append(action)
            c[1].append(addr)
            c[2].append(size)
            c[3].append(stream)
            c[4].append(time_us)
            c[5].append(frames)
            c[6].append(user_metadata)
            c[7].append(pool_id)
        else:  # full: overwrite the oldest entry
            i = self.next
            c[0][i] = action
            c[1][i] = addr
            c[2][i] = size
            c[3][i] = stream
            c[4][i] = time_us
            c[5][i] = frames
            c[6][i] = user_metadata
            c[7][i] = pool_id
            i += 1
            self.next = 0 if i == self.max_entries else i

    def get(self) -> list:
        """Entries oldest first, as tuples in ``FIELDS`` order."""
        i = self.next
        return list(zip(*(col[i:] + col[:i] for col in self.columns)))

    def clear(self) -> None:
        self.columns = tuple([] for _ in FIELDS)
        self.next = 0

    def __len__(self):
        return len(self.columns[0])


def entry_to_dict(entry, frames_of=frame_dicts) -> dict:
    """One trace tuple as PyTorch's trace-entry dict (``frames_of``: a ``SharedFrames`` to
    share frames across one snapshot as PyTorch does)."""
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
        d["frames"] = frames_of(frames)
    return d
