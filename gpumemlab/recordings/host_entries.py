"""Reading the host part of a snapshot: ``host_segments`` and ``host_traces``.

PyTorch 2.14 writes them with ``_record_memory_history(..., record_pinned_host_memory=True)``;
gpumemlab's SimulatedGPU writes them in the device entries' shape (docs/ALLOCATOR.md, "Pinned
host memory"). A snapshot is untrusted input: when either key is malformed, both are dropped
and one note says why, so that the device part is still read (a bad host entry loses the host
view, never the recording).
"""
from __future__ import annotations

from gpumemlab.allocator.snapshot import BLOCK_STATES
from gpumemlab.allocator.trace import TRACE_ACTIONS


class _Bad(Exception):
    pass


def _int(d, key, where):
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(f"{where}: {key!r} is {'missing' if value is None else repr(value)[:40]}, "
                   "expected a non-negative integer")
    return value


def _host_segment(seg, i) -> dict:
    where = f"host_segments[{i}]"
    if not isinstance(seg, dict):
        raise _Bad(f"{where} is {type(seg).__name__}, expected a dict")
    seg = dict(seg)
    _int(seg, "address", where)
    blocks = seg.get("blocks")
    if not isinstance(blocks, list):
        raise _Bad(f"{where}: 'blocks' is not a list")
    clean = []
    for j, b in enumerate(blocks):
        bwhere = f"{where}, block {j}"
        if not isinstance(b, dict):
            raise _Bad(f"{bwhere} is {type(b).__name__}, expected a dict")
        b = dict(b)
        _int(b, "address", bwhere)
        _int(b, "size", bwhere)
        if b.get("state") not in BLOCK_STATES:
            raise _Bad(f"{bwhere}: unknown state {b.get('state')!r}")
        b.setdefault("requested_size", b["size"] if b["state"] != "inactive" else 0)
        _int(b, "requested_size", bwhere)
        if not isinstance(b.setdefault("frames", []), list):
            raise _Bad(f"{bwhere}: 'frames' is not a list")
        clean.append(b)
    seg["blocks"] = clean
    total = seg.setdefault("total_size", sum(b["size"] for b in clean))
    _int(seg, "total_size", where)
    if sum(b["size"] for b in clean) > total:
        raise _Bad(f"{where}: blocks add up to more than total_size {total}")
    seg.setdefault("allocated_size", sum(b["size"] for b in clean
                                         if b["state"] == "active_allocated"))
    seg.setdefault("active_size", sum(b["size"] for b in clean if b["state"] != "inactive"))
    seg.setdefault("requested_size", sum(b["requested_size"] for b in clean))
    seg.setdefault("segment_type", "pinned")
    seg.setdefault("device", -1)
    return seg


def _host_trace(e, k, known_actions) -> dict:
    where = f"host_traces[{k}]"
    if not isinstance(e, dict) or not isinstance(e.get("action"), str):
        raise _Bad(f"{where}: expected a dict with an 'action'")
    # as the device reader (files._trace): an oom names device_free, not addr; an action this
    # reader does not know passes through, like _memory_viz does
    if e["action"] in known_actions:
        _int(e, "device_free" if e["action"] == "oom" else "addr", where)
        _int(e, "size", where)
    if "requested_size" in e:      # the kit's writer adds it to alloc entries
        _int(e, "requested_size", where)
    e = dict(e)
    e.setdefault("stream", 0)
    e.setdefault("time_us", 0)
    return e


def read_host_entries(data: dict, out: dict, note) -> None:
    """Check ``data``'s host keys into ``out`` (both or neither); ``note(text)`` records the
    one line said when they are malformed."""
    if "host_segments" not in data and "host_traces" not in data:
        return
    out.pop("host_segments", None)
    out.pop("host_traces", None)
    try:
        segments = data.get("host_segments", [])
        traces = data.get("host_traces", [])
        if not isinstance(segments, list):
            raise _Bad(f"'host_segments' is {type(segments).__name__}, expected a list")
        if not isinstance(traces, list):
            raise _Bad(f"'host_traces' is {type(traces).__name__}, expected a list")
        host_segments = [_host_segment(s, i) for i, s in enumerate(segments)]
        host_traces = [_host_trace(e, k, TRACE_ACTIONS) for k, e in enumerate(traces)]
    except _Bad as exc:
        note(f"host memory not read ({exc}); the device part is")
        return
    out["host_segments"] = sorted(host_segments, key=lambda s: s["address"])
    out["host_traces"] = host_traces
