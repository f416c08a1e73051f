"""Memory snapshots in PyTorch's format (c10 ``DeviceCachingAllocator::snapshot`` plus
torch/csrc/cuda/Module.cpp's ``_snapshot`` dict building).

One segment per cudaMalloc'd segment, and for expandable segments one per contiguous mapped run.
Segments are sorted by address. A block is ``active_allocated``, ``active_pending_free`` (freed
but waiting for another stream's events) or ``inactive`` (free, cached). As in PyTorch, taking a
snapshot records a ``snapshot`` trace entry that shows up only in the *next* snapshot's trace.
"""
from __future__ import annotations

from typing import Callable

from . import trace as tr
from .block import BlockPool
from .config import AllocatorConfig
from .frames import SharedFrames, frame_dicts

# The states a snapshot gives a block (the one list of them; readers check against it).
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")


class SnapshotMixin:
    """The snapshot part of ``DeviceCachingAllocator``; it owns no state."""

    # Owned by the allocator core (caching_allocator.py) and HistoryMixin:
    config: AllocatorConfig
    large_blocks: BlockPool
    small_blocks: BlockPool
    active_blocks: dict
    alloc_buffer: tr.TraceRingBuffer
    record_trace: Callable  # (action, addr, size, stream, context, pool_id)
    # Owned by PoolsMixin (pools.py):
    graph_pools: dict
    all_block_pools: Callable  # () -> every BlockPool, default first
    private_pool_head_blocks: Callable  # (PrivatePool) -> its segments' first blocks

    def segments_snapshot(self, mempool_id=(0, 0), frames_of=frame_dicts) -> list:
        """The ``segments`` list (of one private pool for a non-default ``mempool_id``, as
        c10 ``snapshot(mempool_id)``); records a ``snapshot`` trace entry. As in c10, a private
        pool's snapshot starts from the blocks with no ``prev`` only, so an expandable
        segment's mapped ranges after an unmapped gap are not in it. ``frames_of`` turns a
        block's context into its frame list (``snapshot`` passes a ``SharedFrames``)."""
        if mempool_id != (0, 0):
            pp = self.graph_pools.get(mempool_id)
            heads = self.private_pool_head_blocks(pp) if pp is not None else []
        else:
            heads = []
            for pool in self.all_block_pools():
                heads.extend(pool.blocks())
            heads.extend(self.active_blocks.values())
        result = []
        total_active = 0
        for head in heads:
            # For expandable segments, one segment for each contiguous mapped range of memory.
            if head.prev is not None and head.prev.mapped:
                continue
            blocks = []
            total_size = allocated_size = active_size = requested_size = 0
            address = head.ptr
            block = head
            while block is not None and block.mapped:
                active = block.allocated or block.event_count > 0 or bool(block.stream_uses)
                if block.allocated:
                    state = "active_allocated"
                elif active:
                    state = "active_pending_free"
                else:
                    state = "inactive"
                blocks.append({
                    "address": address,
                    "size": block.size,
                    "requested_size": block.requested_size,
                    "state": state,
                    "frames": frames_of(block.context_when_allocated),
                })
                address += block.size
                total_size += block.size
                if block.allocated:
                    allocated_size += block.size
                if active:
                    active_size += block.size
                    requested_size += block.requested_size
                block = block.next
            total_active += active_size
            result.append({
                "device": head.device,
                "address": head.ptr,
                "total_size": total_size,
                "allocated_size": allocated_size,
                "active_size": active_size,
                "requested_size": requested_size,
                "stream": head.stream,
                "segment_type": "small" if head.pool.is_small else "large",
                "segment_pool_id": head.pool.mempool_id,
                "is_expandable": head.expandable_segment is not None,
                "frames": frames_of(head.context_when_segment_allocated),
                "blocks": blocks,
            })
        result.sort(key=lambda seg: seg["address"])
        self.record_trace(tr.SNAPSHOT, 0, total_active, 0, None, mempool_id)
        return result

    def trace(self, frames_of=frame_dicts) -> list:
        """The recorded history as PyTorch trace-entry dicts, oldest first."""
        return [tr.entry_to_dict(e, frames_of) for e in self.alloc_buffer.get()]

    def snapshot(self) -> dict:
        """``torch.cuda.memory._snapshot()`` for this device."""
        # As in NativeCachingAllocator::snapshot: the trace is collected before the segments.
        # Frames are shared within the snapshot as THCPModule_memorySnapshot shares them (one
        # dict per distinct frame, one list per distinct stack), so a dump has a real file's
        # shape (and its memo references).
        frames_of = SharedFrames()
        device_traces = [self.trace(frames_of)]
        segments = self.segments_snapshot(frames_of=frames_of)
        return {
            "segments": segments,
            "device_traces": device_traces,
            "allocator_settings": self.config.settings_dict(),
            "external_annotations": [],
        }
