"""What ``gml.replay`` returns: ``ReplayResult`` (final snapshot, timeline, peak, OOM, address
mismatches) and its per-event ``Timeline``; ``ReplayError`` for sources that cannot be replayed."""
from __future__ import annotations

from array import array

__all__ = ["ReplayError", "ReplayResult", "Timeline"]


class ReplayError(ValueError):
    """The source cannot be replayed (no trace, unknown device, ...)."""


class Timeline:
    """Allocated, reserved and requested bytes after every replayed trace entry (parallel arrays)."""

    __slots__ = ("allocated", "reserved", "requested")

    def __init__(self):
        self.allocated, self.reserved, self.requested = array("q"), array("q"), array("q")

    def __len__(self):
        return len(self.allocated)

    def __getitem__(self, i) -> dict:
        """The figures after trace entry ``i`` (negative indices count from the end)."""
        return {"event": range(len(self))[i], "allocated_bytes": self.allocated[i],
                "reserved_bytes": self.reserved[i], "requested_bytes": self.requested[i]}

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def as_dict(self) -> dict:
        return {"allocated": list(self.allocated), "reserved": list(self.reserved),
                "requested": list(self.requested)}


class ReplayResult:
    """What a replay found. ``oom`` is None or a dict: index, entry, size, message.

    ``address_mismatches`` = ``alloc_mismatches`` (allocations not at their recorded address,
    or, in a faithful replay, that ran out of memory) + ``segment_mismatches`` (recorded segment
    releases the model could not make, and whole free segments it kept through a recorded
    ``empty_cache()``) + ``oom_mismatches`` (recorded OOMs the model did not run into); None
    for captures.
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    @property
    def snapshot(self) -> dict:
        """The final state as a ``_snapshot()`` dict (computed once)."""
        if self._snapshot is None:
            self._snapshot = self.allocator.snapshot()
        return self._snapshot

    @property
    def reproduced(self) -> bool:
        """True when every allocation landed on its recorded address (faithful replays only)."""
        return bool(self.faithful and self.address_mismatches == 0 and not self.start_problems)

    def __repr__(self):
        oom = "no OOM" if self.oom is None else f"OOM at entry {self.oom['index']}"
        mism = ("" if self.address_mismatches is None
                else f", {self.address_mismatches} address mismatches")
        return (f"<ReplayResult {self.alloc_conf or 'default settings'!r}: {self.allocations} "
                f"allocations, peak reserved {self.peak_reserved} bytes, {oom}{mism}>")
