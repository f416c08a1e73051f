"""PagedKVCache: one attention layer's K and V stored in fixed-size pages of real torch tensors.

Models vLLM's paged KV cache (paper §4.1-§4.4; ``vllm/attention/ops/paged_attn.py`` writes with
``reshape_and_cache`` through a slot mapping): K and V block pools shaped
``[num_blocks, block_size, num_heads, head_dim]``, addressed through the per-sequence block tables of
a :class:`BlockManager`. Writes scatter through a slot index tensor (no Python loop per token);
copy-on-write copies one block.
"""
from __future__ import annotations

from gpumemlab.units import parse_size

from .block_table import BlockManager


def _torch():
    import torch
    return torch


class PagedKVCache:
    """K/V pages for many sequences, with sharing (fork, prefixes) and copy-on-write.

    Args:
        num_blocks: physical blocks in each pool.
        block_size: token slots per block (vLLM's default is 16).
        num_heads: KV heads.
        head_dim: size of each head.
        dtype, device: of the pools (``torch.float32`` on the CPU by default).
    """

    def __init__(self, num_blocks: int, block_size: int, num_heads: int, head_dim: int, *,
                 dtype=None, device="cpu"):
        torch = _torch()
        for value, name in ((num_heads, "num_heads"), (head_dim, "head_dim")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.manager = BlockManager(num_blocks, block_size)
        self.num_heads, self.head_dim = num_heads, head_dim
        dtype = torch.float32 if dtype is None else dtype
        shape = (num_blocks, block_size, num_heads, head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        self._prefixes: set = set()
        self._workspace = None       # (k, v) gather buffers reused by paged_attention

    @classmethod
    def from_memory(cls, kv_memory, block_size: int, num_heads: int, head_dim: int, *,
                    dtype=None, device="cpu") -> "PagedKVCache":
        """A cache with as many blocks as fit in ``kv_memory`` bytes (K and V together)."""
        torch = _torch()
        dtype = torch.float32 if dtype is None else dtype
        elem = torch.empty((), dtype=dtype).element_size()
        block_bytes = 2 * block_size * num_heads * head_dim * elem
        num_blocks = parse_size(kv_memory, name="kv_memory") // block_bytes
        if num_blocks < 1:
            raise ValueError(f"kv_memory {kv_memory!r} holds no block of {block_bytes} bytes")
        return cls(num_blocks, block_size, num_heads, head_dim, dtype=dtype, device=device)

    # -- shape and bookkeeping ------------------------------------------------------------------
    @property
    def block_size(self) -> int:
        return self.manager.block_size

    @property
    def num_blocks(self) -> int:
        return self.manager.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.manager.num_free_blocks

    @property
    def block_nbytes(self) -> int:
        """Bytes one block takes in K and V together."""
        return 2 * self.k_cache[0].numel() * self.k_cache.element_size()

    def block_table(self, seq) -> list[int]:
        return self.manager.block_table(seq)

    def seq_len(self, seq) -> int:
        return self.manager.seq_len(seq)

    @property
    def sequences(self) -> list:
        return self.manager.sequences

    def memory_usage(self) -> dict:
        """Bytes of the pools: total, in used blocks, holding tokens, and saved by sharing.

        Shared tokens count once in ``token_bytes`` (they occupy one physical slot).
        """
        m, bs = self.manager, self.block_size
        per_slot = self.block_nbytes // bs
        physical_tokens = 0
        seen: set = set()
        for seq in m.sequences:
            table, length = m.block_table(seq), m.seq_len(seq)
            for i, block in enumerate(table):
                if block not in seen:
                    seen.add(block)
                    physical_tokens += min(bs, length - i * bs)
        used = m.num_used_blocks * self.block_nbytes
        return {"total_bytes": self.num_blocks * self.block_nbytes,
                "used_bytes": used,
                "token_bytes": physical_tokens * per_slot,
                "internal_fragmentation_bytes": used - physical_tokens * per_slot,
                "free_bytes": m.num_free_blocks * self.block_nbytes,
                "shared_saving_bytes": (m.logical_blocks() - m.num_used_blocks) * self.block_nbytes}

    # -- writes ----------------------------------------------------------------------------------
    def _as_tokens(self, x, name: str):
        torch = _torch()
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(x).__name__}")
        if x.dim() == 2:
            x = x.unsqueeze(0)
        if x.dim() != 3 or tuple(x.shape[1:]) != (self.num_heads, self.head_dim):
            raise ValueError(f"{name} must be shaped [tokens, {self.num_heads}, {self.head_dim}] "
                             f"or [{self.num_heads}, {self.head_dim}], got {list(x.shape)}")
        return x

    def append(self, seq, k, v) -> None:
        """Write K/V of new tokens (``[n, heads, head_dim]`` or one ``[heads, head_dim]``) to ``seq``.

        A new block is taken only when the last one is full; a shared, partly filled last block is
        copied first (copy on write). Raises NoFreeBlocksError, changing nothing, when full.
        """
        torch = _torch()
        k, v = self._as_tokens(k, "k"), self._as_tokens(v, "v")
        if k.shape != v.shape:
            raise ValueError(f"k and v differ in shape: {list(k.shape)} vs {list(v.shape)}")
        if seq in self._prefixes:
            raise ValueError(f"{seq!r} is a shared prefix; fork it and append to the fork")
        plan = self.manager.append(seq, k.shape[0])
        if plan.copy is not None:
            src, dst = plan.copy
            self.k_cache[dst].copy_(self.k_cache[src])
            self.v_cache[dst].copy_(self.v_cache[src])
        if plan.n == 0:
            return
        table = torch.tensor(self.manager._tables[seq], dtype=torch.long, device=self.k_cache.device)
        pos = torch.arange(plan.start, plan.start + plan.n, device=self.k_cache.device)
        blocks, offsets = table[pos // self.block_size], pos % self.block_size
        self.k_cache[blocks, offsets] = k.to(self.k_cache.dtype)
        self.v_cache[blocks, offsets] = v.to(self.v_cache.dtype)

    def fork(self, parent, child) -> None:
        """``child`` starts as ``parent``, sharing its blocks (parallel sampling, beam search)."""
        self.manager.fork(parent, child)

    def add_prefix(self, prefix, k, v) -> None:
        """Store a shared prefix (a system prompt, few-shot examples) that requests fork from.

        Its blocks stay until ``free(prefix)``; appends go to forks, whose first write into the
        partly filled last block copies it (vLLM marks that block copy-on-write, §4.4).
        """
        if prefix in self.manager:
            raise ValueError(f"sequence {prefix!r} already exists")
        self.append(prefix, k, v)
        self._prefixes.add(prefix)

    def free(self, seq) -> None:
        """Release ``seq``; blocks no other sequence shares return to the free list."""
        self.manager.free(seq)
        self._prefixes.discard(seq)

    # -- reads -----------------------------------------------------------------------------------
    def block_tables_tensor(self, seqs):
        """``(tables [batch, max_blocks] long, lens [batch] long)``; tables padded with block 0."""
        torch = _torch()
        if not len(seqs):
            raise ValueError("seqs must name at least one sequence")
        tables = [self.manager.block_table(s) for s in seqs]
        width = max(1, max(len(t) for t in tables))
        padded = [t + [0] * (width - len(t)) for t in tables]
        device = self.k_cache.device
        return (torch.tensor(padded, dtype=torch.long, device=device),
                torch.tensor([self.manager.seq_len(s) for s in seqs], dtype=torch.long, device=device))

    def workspace(self, num_blocks: int):
        """Two reusable ``[num_blocks, block_size, heads, head_dim]`` buffers (grown on demand)."""
        torch = _torch()
        if self._workspace is None or self._workspace[0].shape[0] < num_blocks:
            shape = (num_blocks,) + tuple(self.k_cache.shape[1:])
            self._workspace = tuple(torch.empty(shape, dtype=self.k_cache.dtype,
                                                device=self.k_cache.device) for _ in range(2))
        return self._workspace[0][:num_blocks], self._workspace[1][:num_blocks]

    def gather(self, seq):
        """The contiguous ``(k, v)`` of ``seq``, each ``[len, heads, head_dim]`` (a copy)."""
        torch = _torch()
        length = self.manager.seq_len(seq)
        table = torch.tensor(self.manager.block_table(seq), dtype=torch.long, device=self.k_cache.device)
        pos = torch.arange(length, device=self.k_cache.device)
        blocks, offsets = table[pos // self.block_size], pos % self.block_size
        return self.k_cache[blocks, offsets], self.v_cache[blocks, offsets]

    def __repr__(self) -> str:
        return (f"PagedKVCache({self.num_blocks} blocks x {self.block_size} tokens, "
                f"{self.num_heads} heads x {self.head_dim}, {self.k_cache.dtype}, "
                f"{len(self.sequences)} sequences, {self.num_free_blocks} blocks free)")
