"""Fixed-size KV pages: a block pool with a free list and reference counts, and per-sequence tables.

Models vLLM's block manager (paper §4.2-§4.4; in code ``vllm/v1/core/block_pool.py``'s ``BlockPool``
and V0's ``BlockSpaceManager``): physical blocks of ``block_size`` token slots, a block table per
sequence mapping its logical blocks to physical ones, a reference count per physical block, and the
three primitives of §5.2: ``append`` (take a new block only when the last one is full; copy on
write when the last block is shared), ``fork`` (a child shares all its parent's blocks) and ``free``
(a block whose count drops to 0 goes back to the free list).

This file holds no tensors: it plans which slots to write and which blocks to copy; the caller
(``PagedKVCache``) moves the data. The serving simulator's sharing study uses it as is.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class NoFreeBlocksError(RuntimeError):
    """Raised when an append or fork needs more free blocks than the pool has (nothing changes)."""


@dataclass(frozen=True)
class AppendPlan:
    """Where ``n`` new tokens of a sequence go.

    ``start`` is the position of the first new token; ``copy`` is ``(src_block, dst_block)`` when
    the shared last block had to be copied before writing into it, else ``None``.
    """

    start: int
    n: int
    copy: tuple[int, int] | None


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


class BlockManager:
    """A pool of ``num_blocks`` blocks of ``block_size`` slots, shared by named sequences."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = _check_int(num_blocks, "num_blocks", 1)
        self.block_size = _check_int(block_size, "block_size", 1)
        # FIFO like vLLM's FreeKVCacheBlockQueue: freed blocks go to the tail, new ones leave the head.
        self._free = deque(range(num_blocks))
        self._ref = [0] * num_blocks
        self._tables: dict = {}      # seq -> list of physical block ids, logical order
        self._lens: dict = {}        # seq -> tokens written

    # -- queries -----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def sequences(self) -> list:
        return list(self._tables)

    def __contains__(self, seq) -> bool:
        return seq in self._tables

    def _require(self, seq):
        if seq not in self._tables:
            raise KeyError(f"unknown sequence {seq!r}")

    def block_table(self, seq) -> list[int]:
        self._require(seq)
        return list(self._tables[seq])

    def seq_len(self, seq) -> int:
        self._require(seq)
        return self._lens[seq]

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def logical_blocks(self) -> int:
        """Blocks all sequences would hold with no sharing (each its own copy)."""
        return sum(len(t) for t in self._tables.values())

    def blocks_needed(self, seq, n: int) -> int:
        """Free blocks an ``append(seq, n)`` would take (new blocks, plus one if copy-on-write)."""
        length = self._lens.get(seq, 0)
        table = self._tables.get(seq, [])
        bs = self.block_size
        new = -(-(length + n) // bs) - len(table)
        cow = 1 if (n > 0 and length % bs and self._ref[table[-1]] > 1) else 0
        return max(new, 0) + cow

    # -- the three primitives -------------------------------------------------------------------
    def add_sequence(self, seq) -> None:
        """Start an empty sequence (``append`` also does this for unknown sequences)."""
        if seq in self._tables:
            raise ValueError(f"sequence {seq!r} already exists")
        self._tables[seq] = []
        self._lens[seq] = 0

    def append(self, seq, n: int = 1) -> AppendPlan:
        """Make room for ``n`` more tokens of ``seq``; return where they go.

        Raises:
            NoFreeBlocksError: when the pool cannot supply the blocks; nothing changes then.
        """
        _check_int(n, "n", 0)
        if seq not in self._tables:
            self.add_sequence(seq)
        need = self.blocks_needed(seq, n)
        if need > len(self._free):
            raise NoFreeBlocksError(f"sequence {seq!r} needs {need} free blocks for {n} tokens, "
                                    f"only {len(self._free)} of {self.num_blocks} are free")
        table, length, bs = self._tables[seq], self._lens[seq], self.block_size
        copy = None
        if n and length % bs and self._ref[table[-1]] > 1:
            # Copy on write: only the partly filled, shared last block is ever copied (§4.4).
            src = table[-1]
            dst = self._take()
            self._ref[src] -= 1
            table[-1] = dst
            copy = (src, dst)
        while len(table) * bs < length + n:
            table.append(self._take())
        self._lens[seq] = length + n
        return AppendPlan(length, n, copy)

    def fork(self, parent, child) -> None:
        """Make ``child`` share every block of ``parent`` (parallel sampling, beam search, prefixes)."""
        self._require(parent)
        if child in self._tables:
            raise ValueError(f"sequence {child!r} already exists")
        table = self._tables[parent]
        for block in table:
            self._ref[block] += 1
        self._tables[child] = list(table)
        self._lens[child] = self._lens[parent]

    def free(self, seq) -> None:
        """Drop ``seq``; blocks no other sequence holds return to the free list."""
        self._require(seq)
        # Reverse order, as vLLM does, so a prefix cache would evict the tail blocks first.
        for block in reversed(self._tables.pop(seq)):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self._free.append(block)
        del self._lens[seq]

    def _take(self) -> int:
        block = self._free.popleft()
        self._ref[block] = 1
        return block

    def check_invariants(self) -> None:
        """Assert refcounts equal table references and the free list holds exactly the 0-count blocks."""
        counts = [0] * self.num_blocks
        for seq, table in self._tables.items():
            assert len(table) == -(-self._lens[seq] // self.block_size), f"table size of {seq!r}"
            for block in table:
                counts[block] += 1
        assert counts == self._ref, "reference counts differ from block-table references"
        free = set(self._free)
        assert len(free) == len(self._free), "a block is twice in the free list"
        assert free == {b for b, c in enumerate(counts) if c == 0}, "free list != unreferenced blocks"
