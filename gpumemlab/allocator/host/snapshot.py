"""The host part of a snapshot: ``host_segments`` and ``host_traces``.

PyTorch 2.14 adds these two keys to ``torch.cuda.memory._snapshot()`` when history is recorded
with ``record_pinned_host_memory=True``. The code that writes them was not reachable from here
(torch 2.13, installed, has neither), so their entries follow the nearest source: the device's
own ``segments`` and ``device_traces`` entries (torch/csrc/cuda/Module.cpp ``_snapshot``), with
``segment_type`` "pinned" and ``device`` -1. One segment per pinned block, since the host
allocator never splits; the reserve segment is one segment holding every block carved from it.
"""
from __future__ import annotations

from .constants import HOST_DEVICE


def _state(block, pending: set) -> str:
    if block.allocated:
        return "active_allocated"
    return "active_pending_free" if id(block) in pending else "inactive"


def _block_dict(block, pending: set) -> dict:
    state = _state(block, pending)
    return {"address": block.ptr, "size": block.size,
            "requested_size": block.requested_size if state != "inactive" else 0,
            "state": state, "frames": list(block.frames or []) if state != "inactive" else []}


def _segment(address, total, blocks, use_register) -> dict:
    return {"device": HOST_DEVICE, "address": address, "total_size": total, "stream": 0,
            "segment_type": "pinned", "segment_pool_id": (0, 0), "is_expandable": False,
            "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
            "requested_size": sum(b["requested_size"] for b in blocks),
            "registered": use_register, "blocks": blocks}


def host_segments(allocator) -> list:
    """Every pinned block the allocator owns, as segments sorted by address."""
    pending = {id(b) for b in allocator.pending_blocks()}
    reserve = allocator.reserve
    carved, result = [], []
    for ptr in sorted(allocator.blocks):
        block = allocator.blocks[ptr]
        if block.from_reserve:
            carved.append(_block_dict(block, pending))
        else:
            result.append(_segment(ptr, block.size, [_block_dict(block, pending)],
                                   block.use_register))
    if reserve is not None and reserve.initialized:
        used = reserve.current - reserve.start
        if reserve.size - used:
            carved.append({"address": reserve.current, "size": reserve.size - used,
                           "requested_size": 0, "state": "inactive", "frames": []})
        segment = _segment(reserve.start, reserve.size, carved, False)
        segment["segment_type"] = "pinned_reserve"
        result.append(segment)
    result.sort(key=lambda s: s["address"])
    return result


def host_snapshot(allocator) -> dict:
    """``{"host_segments": [...], "host_traces": [...]}`` for a snapshot dict."""
    return {"host_segments": host_segments(allocator),
            "host_traces": [dict(t) for t in allocator.traces]}
