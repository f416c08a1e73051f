"""The one way into a snapshot: whatever a reader is handed becomes a normalised ``_snapshot()`` dict.

Replay, the views, the metrics and the doctor all accept the same things: a snapshot dict (simulated,
or a real one from ``torch.cuda.memory._snapshot()``), the bare segment list of
``torch.cuda.memory_snapshot()``, a snapshot file (``load_snapshot``), a device (anything with a
``.snapshot()`` method), a replay result (a ``.snapshot`` attribute holding a dict), or a
:class:`Snapshot` made here before. ``read_snapshot`` turns each into a :class:`Snapshot` whose dict
went through ``normalize_snapshot`` exactly once: a ``Snapshot`` passed again is trusted and not
re-checked, which is what makes a setting search of many replays of one big recording cheap.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from gpumemlab.units import format_size

from .files import load_snapshot, normalize_snapshot

__all__ = ["Snapshot", "read_snapshot"]


@dataclass
class Snapshot:
    """A normalised snapshot plus what the object it came from knew about its device.

    ``snapshot`` is in the current ``_snapshot()`` layout (every key present); ``name`` names the
    source (a file path, "snapshot", or a device's title); ``total_memory`` is the device capacity
    in bytes when the source knew it; ``label`` a device's label; ``notes`` the defaults
    ``normalize_snapshot`` filled in.
    """

    snapshot: dict
    name: str = ""
    total_memory: int | None = None
    label: str = ""
    notes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def read_snapshot(obj, *, name: str | None = None) -> Snapshot:
    """Return a :class:`Snapshot` for any source a reader accepts (see the module docstring).

    Raises:
        TypeError: for an object that holds no snapshot, naming what was given.
        SnapshotError: (a ValueError) for data that cannot be a snapshot, naming the problem.
    """
    if isinstance(obj, Snapshot):
        return obj
    label, capacity, title = "", None, ""
    if isinstance(obj, (str, os.PathLike)):
        path = os.fspath(obj)
        return Snapshot(load_snapshot(path), name=name or path)
    if isinstance(obj, (dict, list)):
        raw = obj
    elif isinstance(obj, tuple):
        raw = list(obj)
    else:
        attr = getattr(obj, "snapshot", None)
        if callable(attr):
            raw = attr()
        elif isinstance(attr, dict):
            raw = attr
        else:
            raise TypeError(
                "expected a snapshot dict (torch.cuda.memory._snapshot() format), a list of "
                "segment dicts, a snapshot file, a device with .snapshot(), or a replay result "
                f"with a .snapshot dict; got {type(obj).__name__}")
        label = str(getattr(obj, "label", "") or "")
        capacity = getattr(obj, "total_memory", None)
        title = device_title(obj, capacity)
    if not isinstance(raw, (dict, list)):
        raise TypeError(f"a snapshot must be a dict, got {type(raw).__name__}")
    where = name or title or "snapshot"
    snapshot, notes = normalize_snapshot(raw, source=where)
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        capacity = None
    return Snapshot(snapshot, name=name or title, total_memory=capacity, label=label, notes=notes)


def device_title(obj, capacity) -> str:
    """A short title for a device: "Simulated GPU 0 (12.00 GiB, simulated)" ("" without a name)."""
    dev_name = str(getattr(obj, "name", "") or "")
    if not dev_name:
        return ""
    index = getattr(obj, "device_index", None)
    details = [format_size(capacity)] if isinstance(capacity, int) else []
    kind = getattr(obj, "kind", None)
    if isinstance(kind, str) and kind:
        details.append(kind)
    return (f"{dev_name} {index}" if isinstance(index, int) else dev_name) + \
        (f" ({', '.join(details)})" if details else "")
