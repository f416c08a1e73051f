"""Allocator state history: the block map at every event of a recorded trace, without re-running it.

Follows the idea of MemoryViz's "Allocator State History" (torch/utils/viz/MemoryViz.js): a
snapshot holds the final ``segments`` and the ``device_traces`` that led there. Walking the trace
backwards from the final segments undoes each entry and yields the state before the first event;
walking forwards re-applies the entries at their recorded addresses. No allocator runs: the
entries say where every block went. The trace does not record block sizes (an ``alloc`` entry
holds the caller's unrounded size), so sizes come from the final snapshot where the block
survives, and otherwise from c10's rounding and ``should_split`` rules applied to the free gap the
block was cut from (docs/ALLOCATOR.md#splitting-and-merging).

Stepping is incremental: ``goto(k + 1)`` applies one entry; a far jump starts from the nearest of
a few hundred checkpoints saved during the single forward pass that also computes the per-event
totals for the timeline.
"""
from __future__ import annotations

from gpumemlab.allocator.constants import K_SMALL_BUFFER
from gpumemlab.viz.describe import describe_event
from gpumemlab.viz.state import ALLOCATED, PENDING, AllocatorState, Seg

from .source import read_source, device_segments, device_trace, pick_device

TOTALS = ("allocated_bytes", "reserved_bytes", "requested_bytes", "active_bytes")


class History:
    """The state of one device's allocator after each event of a snapshot's trace.

    Args:
        source: a snapshot dict with ``device_traces`` (or a device / replay result holding one).
        device: which device's trace to follow.
        checkpoint_every: events between saved states (default: about 256 checkpoints in all).

    ``totals[name][k]`` is the figure after event ``k``; ``goto(k)`` moves to the state after
    event ``k`` (``-1`` is the state before the first event).
    """

    def __init__(self, source, *, device=None, checkpoint_every=None):
        self.source = read_source(source)
        snapshot = self.source.snapshot
        self.device = pick_device(snapshot, device)
        self.rules = self.source.rules
        self.events = device_trace(snapshot, self.device)
        self.final_segments = device_segments(snapshot, self.device)
        self.warnings = []  # entries that did not match the layout (a truncated or odd trace)
        n = len(self.events)
        self.checkpoint_every = checkpoint_every or max(32, -(-n // 256))
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        self._known_size = {}  # event index -> block size read from a later state
        self.initial = self._walk_back()
        self._forward_pass()
        self.index = -1
        self.state = self.initial.copy()
        self.last_description = "state before the first recorded event"

    def __len__(self):
        return len(self.events)

    # ---- the backward walk: final segments -> state before event 0
    def _walk_back(self) -> AllocatorState:
        state = AllocatorState.from_segments(self.final_segments)
        for i in range(len(self.events) - 1, -1, -1):
            e = self.events[i]
            action, addr, size = e.get("action"), e.get("addr", 0), e.get("size", 0)
            seg = state.find(addr) if action in _BLOCK_ACTIONS else None
            if action == "alloc":
                block = seg.blocks.get(addr) if seg is not None else None
                if block is None:
                    self._warn(i, "alloc of a block the later state does not hold")
                    continue
                if block[0] is not None:
                    self._known_size[i] = block[0]
                state.remove_block(seg, addr)
            elif action == "free_completed":
                if seg is None:
                    self._warn(i, "free_completed outside every segment")
                    continue
                state.add_block(seg, addr, None, size, PENDING)
            elif action == "free_requested":
                if seg is not None and addr in seg.blocks:
                    state.set_state(seg, addr, ALLOCATED)
            elif action == "segment_alloc":
                seg = state.segs.get(addr)
                if seg is not None:
                    state.remove_seg(seg)
            elif action == "segment_free":
                state.add_seg(Seg(addr, size, self._pool_hint(i), e.get("stream", 0), False,
                                  e.get("pool_id") or (0, 0)))
            elif action == "segment_map":
                state.unmap_range(addr, size)
            elif action == "segment_unmap":
                state.map_range(addr, size, self._pool_hint(i), e.get("stream", 0),
                                e.get("pool_id") or (0, 0))
        # blocks live before the trace and freed in it: their size must be inferred
        for seg in state.segs.values():
            for a in seg.starts:
                if seg.blocks[a][0] is None:
                    state.set_size(seg, a, self._infer_size(seg, a, seg.blocks[a][1]))
        return state

    def _pool_hint(self, i: int) -> str:
        """Which pool a segment event serves: the pool of the next alloc at its address."""
        e = self.events[i]
        lo, hi = e.get("addr", 0), e.get("addr", 0) + e.get("size", 0)
        for later in self.events[i + 1:i + 64]:
            if later.get("action") == "alloc" and lo <= later.get("addr", -1) < hi:
                return self.rules.pool(self.rules.round_size(later.get("size", 0)))
        return "small" if e.get("size", 0) <= K_SMALL_BUFFER and \
            e.get("action") in ("segment_alloc", "segment_free") else "large"

    def _infer_size(self, seg: Seg, address: int, requested: int) -> int:
        """The block c10 would carve at ``address`` for ``requested`` bytes (split or whole gap)."""
        gap = seg.gap_end(address) - address
        rounded = self.rules.round_size(requested)
        if rounded >= gap:
            return gap
        split = (gap - rounded >= 512) if seg.expandable else \
            self.rules.should_split(seg.pool, gap, rounded)
        return rounded if split else gap

    def _warn(self, i: int, text: str) -> None:
        if len(self.warnings) < 100:
            self.warnings.append(f"event {i}: {text}")

    # ---- forward
    def apply(self, state: AllocatorState, i: int) -> None:
        """Apply event ``i`` to ``state`` (which must be the state before it)."""
        e = self.events[i]
        action, addr, size = e.get("action"), e.get("addr", 0), e.get("size", 0)
        if action == "alloc":
            seg = state.find(addr)
            if seg is None:
                return
            block_size = self._known_size.get(i) or self._infer_size(seg, addr, size)
            state.add_block(seg, addr, block_size, size, ALLOCATED)
        elif action == "free_requested":
            seg = state.find(addr)
            if seg is not None and addr in seg.blocks:
                state.set_state(seg, addr, PENDING)
        elif action == "free_completed":
            seg = state.find(addr)
            if seg is not None and addr in seg.blocks:
                state.remove_block(seg, addr)
        elif action == "segment_alloc":
            state.add_seg(Seg(addr, size, self._pool_hint(i), e.get("stream", 0), False,
                              e.get("pool_id") or (0, 0)))
        elif action == "segment_free":
            seg = state.segs.get(addr)
            if seg is not None:
                state.remove_seg(seg)
        elif action == "segment_map":
            state.map_range(addr, size, self._pool_hint(i), e.get("stream", 0),
                            e.get("pool_id") or (0, 0))
        elif action == "segment_unmap":
            state.unmap_range(addr, size)

    def _forward_pass(self) -> None:
        """One pass: per-event totals for the timeline, and the checkpoints for goto()."""
        state = self.initial.copy()
        self.totals = {name: [] for name in TOTALS}
        self._checkpoints = []  # _checkpoints[c] = state before event c * checkpoint_every
        for i in range(len(self.events)):
            if i % self.checkpoint_every == 0:
                self._checkpoints.append(state.copy())
            self.apply(state, i)
            for name in TOTALS:
                self.totals[name].append(getattr(state, name))
        self.final_state = state

    def goto(self, k: int) -> AllocatorState:
        """Move to the state after event ``k`` (-1: before the first) and return it."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"event index must be an int, not {type(k).__name__}")
        if not -1 <= k < len(self.events):
            raise ValueError(f"event index {k} out of range: the trace has {len(self.events)} "
                             f"events (0..{len(self.events) - 1}, or -1 for the start)")
        target = k + 1  # number of events applied
        applied = self.index + 1
        if not applied <= target <= applied + self.checkpoint_every:
            c = target // self.checkpoint_every
            if c >= len(self._checkpoints):
                c = len(self._checkpoints) - 1
            self.state = self._checkpoints[c].copy() if c >= 0 else self.initial.copy()
            applied = c * self.checkpoint_every if c >= 0 else 0
        for i in range(applied, target):
            if i == target - 1:
                self.last_description = describe_event(self, self.state, i)
            self.apply(self.state, i)
        if target == 0:
            self.last_description = "state before the first recorded event"
        self.index = k
        return self.state

    # ---- read-outs
    def segments(self) -> list:
        """The current state as snapshot segments."""
        return self.state.segments(self.device)

    def snapshot(self) -> dict:
        """The current state as a snapshot dict (trace cut at the current event)."""
        traces = [[] for _ in range(self.device + 1)]
        traces[self.device] = self.events[:self.index + 1]
        return {"segments": self.segments(), "device_traces": traces,
                "allocator_settings": dict(self.source.settings), "external_annotations": []}

    def timeline(self) -> list:
        """Per-event totals as dicts: event, action, allocated/reserved/requested/active bytes."""
        return [{"event": i, "action": e.get("action"),
                 "user_metadata": e.get("user_metadata") or "",
                 **{name: self.totals[name][i] for name in TOTALS}}
                for i, e in enumerate(self.events)]

    def matches_final(self) -> bool:
        """Whether the forward replay ends in exactly the recorded segments (a self-check)."""
        def key(segments):
            return [(s["address"], s["total_size"],
                     [(b.get("address"), b["size"], b["state"]) for b in s["blocks"]])
                    for s in segments]
        recorded = [dict(s, blocks=_with_addresses(s)) for s in self.final_segments]
        return key(self.final_state.segments(self.device)) == key(recorded)


_BLOCK_ACTIONS = ("alloc", "free_requested", "free_completed")


def _with_addresses(seg: dict) -> list:
    out, offset = [], seg["address"]
    for b in seg["blocks"]:
        addr = b.get("address", offset)
        out.append(dict(b, address=addr))
        offset = addr + b["size"]
    return out
