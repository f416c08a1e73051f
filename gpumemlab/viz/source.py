"""What the views accept, turned into one thing: a snapshot dict in PyTorch's ``_snapshot()`` format.

A learner may hand a view a snapshot dict (simulated, or a real one loaded from
``torch.cuda.memory._dump_snapshot``), the bare segment list of ``memory_snapshot()``, a device
(anything with a ``.snapshot()`` method), or a replay result (a ``.snapshot`` attribute holding a
dict). ``read_source`` accepts all of them and keeps what the snapshot alone cannot say: the
device's name and capacity. Nothing here imports matplotlib.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .size_rules import Rules

_SEGMENT_KEYS = ("address", "total_size", "blocks")
_BLOCK_KEYS = ("size", "state")
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")


@dataclass
class Source:
    """A snapshot plus what is known about the device it came from."""

    snapshot: dict
    name: str = ""
    total_memory: int | None = None
    label: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def settings(self) -> dict:
        return self.snapshot.get("allocator_settings") or {}

    @property
    def rules(self) -> Rules:
        return Rules.from_settings(self.settings)


def read_source(obj, *, total_memory=None) -> Source:
    """Return a :class:`Source` for a snapshot dict, segment list, device or replay result.

    Raises:
        TypeError: for anything else, naming what was given.
        ValueError: for a snapshot whose segments or blocks miss PyTorch's keys.
    """
    if isinstance(obj, Source):
        return obj
    name, label, capacity = "", "", None
    if isinstance(obj, dict):
        snapshot = obj
    elif isinstance(obj, (list, tuple)):
        snapshot = {"segments": list(obj)}
    else:
        snap_attr = getattr(obj, "snapshot", None)
        if callable(snap_attr):
            snapshot = snap_attr()
        elif isinstance(snap_attr, dict):
            snapshot = snap_attr
        else:
            raise TypeError(
                "expected a snapshot dict (torch.cuda.memory._snapshot() format), a list of "
                "segment dicts, a device with .snapshot(), or a replay result with a .snapshot "
                f"dict; got {type(obj).__name__}")
        label = str(getattr(obj, "label", "") or "")
        capacity = getattr(obj, "total_memory", None)
        name = _device_name(obj, capacity)
    if not isinstance(snapshot, dict):
        raise TypeError(f"a snapshot must be a dict, got {type(snapshot).__name__}")
    validate_segments(snapshot.get("segments"))
    if total_memory is not None:
        capacity = total_memory
    if capacity is not None:
        from gpumemlab.units import parse_size
        capacity = parse_size(capacity, name="total_memory")
    return Source(snapshot=snapshot, name=name, total_memory=capacity, label=label)


def _device_name(obj, capacity) -> str:
    """A short title for a device: "Simulated GPU 0 (12.00 GiB, simulated)"."""
    name = str(getattr(obj, "name", "") or "")
    if not name:
        return ""
    index = getattr(obj, "device_index", None)
    details = [] if not isinstance(capacity, int) else [_fmt(capacity)]
    kind = getattr(obj, "kind", None)
    if isinstance(kind, str) and kind:
        details.append(kind)
    return (f"{name} {index}" if isinstance(index, int) else name) + \
        (f" ({', '.join(details)})" if details else "")


def _fmt(size: int) -> str:
    from gpumemlab.units import format_size
    return format_size(size)


def validate_segments(segments) -> None:
    """Check the keys the views rely on; a clear ValueError beats a KeyError deep in a plot."""
    if not isinstance(segments, list):
        raise ValueError("snapshot has no 'segments' list: expected the dict returned by "
                         "torch.cuda.memory._snapshot() or gpu.snapshot()")
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict):
            raise ValueError(f"segment {i} is a {type(seg).__name__}, not a dict")
        missing = [k for k in _SEGMENT_KEYS if k not in seg]
        if missing:
            raise ValueError(f"segment {i} lacks key(s) {missing}: not a PyTorch snapshot segment")
        for j, block in enumerate(seg["blocks"]):
            missing = [k for k in _BLOCK_KEYS if k not in block]
            if missing:
                raise ValueError(f"segment {i} block {j} lacks key(s) {missing}")


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


def block_address(seg: dict, offset_bytes: int, block: dict) -> int:
    """A block's address: recorded, or the segment address plus the sizes before it."""
    return block.get("address", seg["address"] + offset_bytes)


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
        from gpumemlab.units import format_size
        parts.append(f"max_split_size={format_size(int(max_split))}")
    return ", ".join(parts)
