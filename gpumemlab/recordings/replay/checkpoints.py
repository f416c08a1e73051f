"""Saved states of a faithful replay on an unlimited card, from which a replay of the same
recording on a smaller card resumes instead of starting over (the smallest-card search).

Why it is exact: the capacity is read only when memory is asked of the driver (``cudaMalloc``,
mapping expandable pages) and, under a memory fraction, through ``allowed_memory_maximum``; an
expandable segment's reservation is sized from it too. So under settings with neither a memory
fraction nor expandable segments, a replay on a card of C bytes does exactly what the unlimited
replay did for as long as every driver call of the unlimited one would have fitted in C, that
is while its reserved bytes never passed C. A state saved at entry ``i`` whose peak reserved
so far is at most C is therefore the state the C-byte replay reaches at ``i`` (dictated
addresses and all); from there it continues on C bytes.

A saved state is a deep copy of the model (allocator, live blocks, pool router) and of the
loop's own variables (``loop.run_trace``). Blocks form long ``prev``/``next`` chains, which
``copy.deepcopy`` would follow one frame per block (a segment split into thousands of blocks
overflows the stack), so every block is made first and the rest is copied around them.
"""
from __future__ import annotations

import copy

from gpumemlab.allocator.block import Block

__all__ = ["Checkpoints", "checkpoints_exact", "copy_state"]

SAVES = 64   # states saved over one pass; a probe resumes at most 1/64 of the trace before it
KEPT_BLOCKS = 500_000   # blocks in all the states kept (about 150 MiB): beyond, every other goes


def checkpoints_exact(config) -> bool:
    """Whether states of an unlimited replay under ``config`` are those of a smaller card's
    (no memory fraction, no expandable segments: see the module docstring)."""
    return not config.expandable_segments and config.per_process_memory_fraction >= 1.0


class Checkpoints:
    """The states saved during one faithful replay, each with its peak reserved bytes so far.

    ``every``: entries between saves. A state is dropped when a later one has the same peak
    (the later serves every card the earlier does, nearer the end)."""

    def __init__(self, entries: int, saves: int = SAVES):
        self.every = max(1, -(-entries // saves))
        self.saved = []           # (index, peak reserved bytes, state, blocks), index ascending
        self.setup = None         # what the result of a resumed replay repeats (replay())

    def next_index(self, i: int) -> int:
        """The first index at or after ``i`` where a state is saved."""
        return -(-i // self.every) * self.every if i else self.every

    def save(self, i: int, alloc, peak_reserved: int, state: dict) -> None:
        if self.saved and self.saved[-1][1] == peak_reserved:
            self.saved.pop()
        blocks = _blocks(state)
        self.saved.append((i, peak_reserved, copy_state(state, blocks), len(blocks)))
        while len(self.saved) > 1 and sum(s[3] for s in self.saved) > KEPT_BLOCKS:
            self.saved = self.saved[-1::-2][::-1]     # thin out, keeping the newest

    def best(self, capacity: int):
        """A copy of the latest state valid on ``capacity`` bytes (peak so far within it), as
        ``(index, state)``; None when no saved state is."""
        for i, peak, state, _ in reversed(self.saved):
            if peak <= capacity:
                return i, copy_state(state)
        return None


def _blocks(state: dict) -> list:
    """Every Block reachable from the allocator's live and free blocks, whole segments."""
    alloc = state["alloc"]
    roots = list(alloc.active_blocks.values()) + list(state["live"].values())
    pools = [alloc.large_blocks, alloc.small_blocks]
    for private in alloc.graph_pools.values():
        pools += [private.large_blocks, private.small_blocks]
    for pool in pools:
        roots += pool.by_ptr.values()
        roots += pool.unmapped_by_ptr.values()
    seen, out = set(), []
    for root in roots:
        if id(root) in seen:
            continue
        b = root
        while b.prev is not None:
            b = b.prev
        while b is not None:       # the whole segment, head first
            seen.add(id(b))
            out.append(b)
            b = b.next
    return out


def copy_state(state: dict, blocks=None) -> dict:
    """A deep copy of ``state`` (a dict holding the allocator and what refers to it), its
    Blocks (``_blocks(state)`` unless given) made first so that no copy recurses along a
    segment's chain."""
    memo = {}
    blocks = _blocks(state) if blocks is None else blocks
    for b in blocks:
        memo[id(b)] = Block.__new__(Block)
    for b in blocks:
        new = memo[id(b)]
        for slot in Block.__slots__:
            setattr(new, slot, copy.deepcopy(getattr(b, slot), memo))
    return copy.deepcopy(state, memo)
