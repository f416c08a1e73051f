"""Streams and events: c10's ``recordStream``, ``insert_events``, ``process_events`` and
``synchronize_and_free_events`` (both first give the blocks freed during a CUDA graph capture
their events: ``insert_events_deferred_until_no_capture`` in pools.py).

A block used on another stream (``record_stream``) is not reusable when it is freed: one event is
recorded per stream that used it, and the block stays ``active_pending_free`` until every event has
completed. The simulator runs no kernels: by default a stream has no work queued, so an event
counts as complete the next time the allocator looks (the next ``malloc``), or when
``empty_cache``/an OOM retry synchronizes. A stream marked busy (``busy_streams``: simulated work
still running there, ``SimulatedGPU.launch``) answers "not ready" instead, as ``cudaEventQuery``
returns ``cudaErrorNotReady``: ``process_events`` then stops at that stream's first event, as c10
does, and its blocks stay pending until the stream is idle again or a synchronize waits for it.
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
        self.busy_streams = set()   # streams with simulated work still running: events not ready

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
        """c10 ``process_events`` (each malloc): per stream, complete events in record order and
        free their blocks, stopping at a stream's first event that is not ready (a busy stream)."""
        if self.deferred_blocks:
            self.insert_events_deferred_until_no_capture(context)
        if self.cuda_events:
            self._complete_events(context, skip=self.busy_streams)

    def synchronize_and_free_events(self, context) -> None:
        """Wait for every outstanding event (``empty_cache``, the OOM retry): c10 synchronizes
        each event, so the work of every stream is finished afterwards."""
        self.stats.num_sync_all_streams += 1
        self.insert_events_deferred_until_no_capture(context)
        self.busy_streams.clear()
        self._complete_events(context, skip=())

    def _complete_events(self, context, skip) -> None:
        # Per stream in the order the events were recorded, as c10 walks cuda_events; a block
        # becomes free when its last event completes. A skipped stream's events all wait.
        events = self.cuda_events
        self.cuda_events = {s: blocks for s, blocks in events.items() if s in skip}
        for stream, blocks in events.items():
            if stream in skip:
                continue
            for block in blocks:
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, context)
