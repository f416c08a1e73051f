"""What the views accept, turned into one thing: a normalised snapshot in PyTorch's ``_snapshot()`` format.

A learner may hand a view a snapshot dict (simulated, or a real one loaded from
``torch.cuda.memory._dump_snapshot``), the bare segment list of ``memory_snapshot()``, a snapshot
file, a device (anything with a ``.snapshot()`` method), or a replay result (a ``.snapshot``
attribute holding a dict). ``read_source`` hands each to the recordings' one normalising entry
(``gpumemlab.recordings.source.read_snapshot``, the same one replay uses) and keeps what the
snapshot alone cannot say: the device's name and capacity, and the size rules of its settings.
Nothing here imports matplotlib.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.recordings.source import Snapshot, read_snapshot
from gpumemlab.units import format_size, parse_size

from .size_rules import Rules


@dataclass
class Source(Snapshot):
    """A normalised snapshot plus what is known about the device it came from."""

    @property
    def settings(self) -> dict:
        return self.snapshot.get("allocator_settings") or {}

    @property
    def rules(self) -> Rules:
        return Rules.from_settings(self.settings)


def read_source(obj, *, total_memory=None) -> Source:
    """Return a :class:`Source` for a snapshot dict, segment list, file, device or replay result.

    Raises:
        TypeError: for anything else, naming what was given.
        ValueError: (``SnapshotError``) for a snapshot whose segments or blocks are malformed.
    """
    if isinstance(obj, Source) and total_memory is None:
        return obj
    snap = read_snapshot(obj)
    capacity = snap.total_memory if total_memory is None else \
        parse_size(total_memory, name="total_memory")
    return Source(snap.snapshot, name=snap.name, total_memory=capacity, label=snap.label,
                  notes=snap.notes, extra=snap.extra)


def pick_device(snapshot: dict, device=None) -> int:
    """The device a view shows: the one asked for, else the first segment's, else 0."""
    if device is not None:
        return int(device)
    for seg in snapshot.get("segments", ()):
        return int(seg.get("device", 0))
    traces = snapshot.get("device_traces") or []
    for index, trace in enumerate(traces):
        if trace:
            return index
    return 0


def device_segments(snapshot: dict, device=None) -> list:
    """The segments of one device, in address order (the order 'seg N' numbers them)."""
    dev = pick_device(snapshot, device)
    segs = [s for s in snapshot.get("segments", ()) if int(s.get("device", 0)) == dev]
    return sorted(segs, key=lambda s: s["address"])


def device_trace(snapshot: dict, device=None) -> list:
    """The trace entries of one device ([] when history was not recorded)."""
    traces = snapshot.get("device_traces") or []
    dev = pick_device(snapshot, device)
    return list(traces[dev]) if dev < len(traces) else []


def settings_line(settings: dict) -> str:
    """One line naming the allocator settings, e.g. "PYTORCH_CUDA_ALLOC_CONF='' (defaults)"."""
    if not settings:
        return "allocator settings not recorded"
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    parts = []
    if conf is not None:
        parts.append(f"PYTORCH_CUDA_ALLOC_CONF={conf!r}" + ("" if conf else " (defaults)"))
    parts.append(f"expandable_segments={bool(settings.get('expandable_segments', False))}")
    max_split = settings.get("max_split_size", -1)
    if max_split is not None and int(max_split) >= 0:
        parts.append(f"max_split_size={format_size(int(max_split))}")
    return ", ".join(parts)
