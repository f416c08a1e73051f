"""What a replay needs to know before its first entry: the settings and device a recording was
made with, the capacity of the model's device, and where recorded addresses land in the model's
address space."""
from __future__ import annotations

from gpumemlab.allocator.config import recorded_conf
from gpumemlab.allocator.driver import VA_BASE, VA_LIMIT
from gpumemlab.units import parse_size

from .result import ReplayError

__all__ = ["UNLIMITED_BYTES", "recorded_alloc_conf", "replay_devices", "address_shift", "capacity"]

UNLIMITED_BYTES = 1 << 42          # "no capacity limit": 4 TiB (leaves the model address space)


def recorded_alloc_conf(snapshot: dict) -> str:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` a snapshot was recorded under ("" = defaults): its
    recorded string and fields, read by ``config.recorded_conf`` (the reader the views' size
    rules use too, so replay and views round alike)."""
    return recorded_conf(snapshot.get("allocator_settings") or {})


def replay_devices(snapshot) -> list:
    """The devices of ``snapshot`` (a normalized dict) with a trace to replay, in order."""
    out = []
    for d, t in enumerate(snapshot.get("device_traces") or []):
        if t and not (len(t) <= 1 and any(e["action"] == "snapshot" for e in t)):
            out.append(d)
    return out


def address_shift(segments, trace):
    """An offset moving recorded addresses into the simulated driver's address range."""
    addrs = [s["address"] for s in segments]
    addrs += [e["addr"] for e in trace if e["action"] in ("segment_alloc", "segment_map")]
    if not addrs or (min(addrs) >= VA_BASE and max(addrs) < VA_LIMIT - (1 << 40)):
        return 0
    shift = VA_BASE - (min(addrs) & ~(2 * 1024 * 1024 - 1))
    if max(addrs) + shift >= VA_LIMIT - (1 << 40):
        raise ReplayError("recorded addresses span more address space than the model has")
    return shift


def capacity(total_memory, trace, segments):
    if total_memory is not None:
        return parse_size(total_memory, name="total_memory")
    # an OOM in the recording tells the device size: reserved then + what the driver had free
    for e in trace:
        if e["action"] == "oom":
            return _reserved_at_first_oom(trace, segments) + e["device_free"]
    return UNLIMITED_BYTES


def _reserved_at_first_oom(trace, segments):
    delta = 0
    for e in trace:
        a = e["action"]
        if a == "oom":
            break
        if a in ("segment_alloc", "segment_map"):
            delta += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            delta -= e["size"]
    # final reserved minus the whole trace's change gives reserved at the start
    total_delta = sum(e["size"] if e["action"] in ("segment_alloc", "segment_map") else -e["size"]
                      for e in trace if e["action"] in ("segment_alloc", "segment_map",
                                                        "segment_free", "segment_unmap"))
    start = sum(s["total_size"] for s in segments) - total_delta
    return max(start + delta, 0)
