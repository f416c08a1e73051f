"""Streams and events: c10's ``recordStream``, ``insert_events``, ``process_events`` and
``synchronize_and_free_events`` (both first give the blocks freed during a CUDA graph capture
their events: ``insert_events_deferred_until_no_capture`` in pools.py).

A block used on another stream (``record_stream``) is not reusable when it is freed: one event is
recorded per stream that used it, and the block stays ``active_pending_free`` until every event has
completed. The simulator has no GPU work queued, so an event counts as complete the next time the
allocator looks (the next ``malloc``), or when ``empty_cache``/an OOM retry synchronizes.
"""
from __future__ import annotations

from typing import Callable

from .block import Block
from .stats import DeviceStats


def _check_stream(stream):
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise ValueError(f"stream must be a non-negative int handle (0 = default stream), got {stream!r}")


class EventsMixin:
    """The streams-and-events part of ``DeviceCachingAllocator``."""

    # Owned by this part:
    cuda_events: dict  # stream -> blocks with an outstanding event there, in record order
    # Owned by the allocator core (caching_allocator.py):
    stats: DeviceStats
    free_block: Callable  # free_block(block, context)
    # Owned by PoolsMixin (pools.py):
    num_active_captures: int
    deferred_blocks: list
    insert_events_deferred_until_no_capture: Callable  # (context)
    note_stream_use_during_capture: Callable  # (block, stream)

    def _init_events(self) -> None:
        self.cuda_events = {}

    def record_stream(self, block: Block, stream: int) -> None:
        """c10 ``recordStream``: the block is also used on ``stream``; on free it waits for it."""
        _check_stream(stream)
        if not block.allocated:
            raise ValueError("record_stream on a block that is not allocated")
        if stream == block.stream:
            return  # uses on the allocation stream need no synchronization
        if block.stream_uses is None:
            block.stream_uses = {}
        block.stream_uses[stream] = None
        if self.num_active_captures:
            self.note_stream_use_during_capture(block, stream)

    def insert_events(self, block: Block) -> None:
        streams = block.stream_uses
        block.stream_uses = None
        for stream in streams:
            block.event_count += 1
            self.cuda_events.setdefault(stream, []).append(block)

    def process_events(self, context) -> None:
        """Outstanding events are complete by the next malloc: free their blocks."""
        if self.deferred_blocks:
            self.insert_events_deferred_until_no_capture(context)
        if self.cuda_events:
            self._complete_all_events(context)

    def synchronize_and_free_events(self, context) -> None:
        """Wait for every outstanding event (``empty_cache``, the OOM retry)."""
        self.stats.num_sync_all_streams += 1
        self.insert_events_deferred_until_no_capture(context)
        self._complete_all_events(context)

    def _complete_all_events(self, context) -> None:
        # Per stream in the order the events were recorded, as c10 walks cuda_events; a block
        # becomes free when its last event completes.
        events = self.cuda_events
        self.cuda_events = {}
        for blocks in events.values():
            for block in blocks:
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, context)
