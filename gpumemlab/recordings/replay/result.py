"""What ``gml.replay`` returns: ``ReplayResult`` (final snapshot, timeline, peak, OOM, address
mismatches) and its per-event ``Timeline``; ``ReplayError`` for sources that cannot be replayed."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from gpumemlab.units import format_size

__all__ = ["ReplayError", "ReplayResult", "ReplayWarning", "Timeline"]


class ReplayError(ValueError):
    """The source cannot be replayed (no trace, unknown device, ...)."""


class ReplayWarning(UserWarning):
    """A replay ran, but part of the recording could not be reproduced exactly (see the
    result's ``start_problems``)."""


class Timeline:
    """Allocated, reserved and requested bytes after every replayed trace entry (parallel arrays);
    ``start`` holds the same three figures before the first entry (the rebuilt start state);
    ``metadata`` each replayed entry's recorded ``user_metadata`` (its step or phase marks)."""

    __slots__ = ("allocated", "reserved", "requested", "start", "metadata")

    def __init__(self):
        self.allocated, self.reserved, self.requested = array("q"), array("q"), array("q")
        self.start = {"allocated_bytes": 0, "reserved_bytes": 0, "requested_bytes": 0}
        self.metadata = []

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


@dataclass(eq=False)
class ReplayResult:
    """What a replay found (``gml.replay`` fills every field; sizes are bytes).

    ``address_mismatches`` = ``alloc_mismatches`` + ``segment_mismatches`` + ``oom_mismatches``;
    all four are None for a capture (it has no recorded addresses).
    """

    source: str                    # the file path, "snapshot", a device's title, or "capture"
    alloc_conf: str                # the PYTORCH_CUDA_ALLOC_CONF the model ran under
    recorded_alloc_conf: str       # the one the recording was made under ("" = defaults)
    total_memory: int              # the model's device capacity
    faithful: bool                 # True: recorded settings and addresses dictated to the model
    allocator: object              # the DeviceCachingAllocator after the last replayed entry
    timeline: Timeline             # allocated/reserved/requested after every replayed entry
    peak_reserved: int             # peak reserved bytes during the replay (start state excluded)
    peak_allocated: int            # peak allocated bytes during the replay
    oom: dict | None               # None, or {index, entry, size, message} of the first OOM
    allocations: int               # alloc entries replayed
    address_mismatches: int | None  # everything that did not go as recorded (see above)
    alloc_mismatches: int | None   # allocations not at their recorded address, or that ran out
    segment_mismatches: int | None  # recorded releases the model could not make, and whole free
    #                                 segments it kept through a recorded empty_cache()
    oom_mismatches: int | None     # recorded OOMs the model did not run into
    device: int                    # which device's trace was replayed
    entries: int                   # trace entries of that device
    replayed: int                  # entries replayed (fewer than entries after a stop on OOM)
    start_problems: list           # why the recorded start state could not be rebuilt exactly
    notes: list                    # remarks on the trace (frees of unknown addresses, ...)
    elapsed_s: float               # seconds the trace loop took
    address_shift: int             # offset added to recorded addresses (0 when they fit)
    start_trim: dict | None = None  # a card smaller than the recorded start state (replay.trim)
    _snapshot: dict | None = field(default=None, repr=False)

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
                f"allocations, peak reserved {format_size(self.peak_reserved)}, {oom}{mism}>")
