"""Prefix caching by block hash, as vLLM V1 does it, with an optional CPU tier under it.

Models ``vllm/v1/core/block_pool.py`` and ``vllm/v1/core/kv_cache_utils.py`` (vLLM 0.29):

* a FULL block's hash is ``hash((parent block's hash, its tokens))``, so equal hashes mean an equal
  prefix up to and including that block; partial blocks are never cached;
* a new request reuses the longest run of leading blocks whose hashes are cached, and never its
  whole prompt: at least the last prompt token is recomputed (to get its logits);
* blocks whose reference count drops to 0 go to the TAIL of the free queue (a request's blocks in
  reverse order, so its last block goes first) and keep their hash: the queue is an LRU of cached
  blocks. A new block is taken from the HEAD; if it still holds a hash, that entry is evicted;
* identical blocks computed by two requests at once are both kept (no de-duplication).

The CPU tier (``host_blocks`` > 0) models offloading in the style of vLLM's offloading connector and
LMCache, simplified: a block evicted from the GPU moves to a host LRU of ``host_blocks`` blocks; a
lookup that runs out of GPU hits continues the hash chain in the host tier, and each host hit
costs a copy of one block over ``host_bandwidth`` bytes/s (counted, not timed into the schedule).
"""
from __future__ import annotations

from collections import OrderedDict


def block_hashes(tokens, block_size: int, limit: int | None = None, known=()) -> list:
    """Chained hashes of the full blocks of ``tokens`` (at most ``limit`` blocks).

    ``known`` are hashes already computed for the first blocks (a prompt's, when its output
    is added); the chain continues from the last of them.
    """
    n = len(tokens) // block_size
    if limit is not None:
        n = min(n, limit)
    out = list(known[:n])
    parent = out[-1] if out else None
    for i in range(len(out), n):
        parent = hash((parent, tuple(tokens[i * block_size:(i + 1) * block_size])))
        out.append(parent)
    return out


class HashBlockPool:
    """``num_blocks`` GPU blocks with vLLM's prefix cache, and an optional host tier."""

    def __init__(self, num_blocks: int, block_size: int, *, host_blocks: int = 0):
        for value, name, low in ((num_blocks, "num_blocks", 1), (block_size, "block_size", 1),
                                 (host_blocks, "host_blocks", 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        self.num_blocks, self.block_size, self.host_blocks = num_blocks, block_size, host_blocks
        self.free = OrderedDict((b, None) for b in range(num_blocks))   # head = next to reuse
        self.ref = [0] * num_blocks
        self.hash_of = [None] * num_blocks
        self.cached: dict = {}          # hash -> {block id: None} (several if computed twice)
        self.host: OrderedDict = OrderedDict()   # hash -> None, oldest first
        self.cached_free_blocks = 0     # free blocks still holding a prefix (reusable on a hit)
        self.evictions = 0              # cached GPU blocks whose hash was dropped for reuse
        self.host_evictions = 0

    # -- queries ---------------------------------------------------------------------------
    def match(self, hashes) -> tuple[list, int]:
        """GPU blocks of the longest cached run of ``hashes``, and how many more the host holds."""
        blocks = []
        for h in hashes:
            entry = self.cached.get(h)
            if not entry:
                break
            blocks.append(next(iter(entry)))
        host = 0
        for h in hashes[len(blocks):]:
            if h not in self.host:
                break
            host += 1
        return blocks, host

    # -- a request's life --------------------------------------------------------------------
    def admit(self, prompt, total_len: int):
        """Blocks for a request of ``total_len`` tokens; None if they cannot be had now.

        Returns ``(blocks, gpu_hit_blocks, host_hit_blocks, prompt_hashes)``; the caller passes
        them back to ``cache_prompt`` (after the prefill) and ``release`` (at the end).
        """
        bs = self.block_size
        hashes = block_hashes(prompt, bs)
        hits, host = self.match(hashes[:(len(prompt) - 1) // bs])
        need = -(-total_len // bs) - len(hits)
        idle_hits = sum(1 for b in hits if self.ref[b] == 0)
        if need > len(self.free) - idle_hits:
            return None
        for b in hits:
            if self.ref[b] == 0:
                del self.free[b]
                self.cached_free_blocks -= 1
            self.ref[b] += 1
        loaded = hashes[len(hits):len(hits) + host]
        for h in loaded:                 # touched first, so the evictions below keep them
            self.host.move_to_end(h)
        blocks = list(hits)
        for _ in range(need):
            b, _ = self.free.popitem(last=False)
            if self.hash_of[b] is not None:
                self.cached_free_blocks -= 1
                self._evict(b)
            self.ref[b] = 1
            blocks.append(b)
        for b, h in zip(blocks[len(hits):], loaded):     # copied in from the host tier
            self._cache(b, h)
        return blocks, len(hits), host, hashes

    def cache_prompt(self, blocks, hashes) -> None:
        """The prompt's full blocks are computed: cache them (vLLM does this after the prefill)."""
        for b, h in zip(blocks, hashes):
            if self.hash_of[b] is None:
                self._cache(b, h)

    def release(self, blocks, tokens, known=()) -> None:
        """The request finished: cache its full blocks, then free them, last block first.

        ``known``: the prompt's hashes from ``admit``, so that only the output's are computed."""
        for b, h in zip(blocks, block_hashes(tokens, self.block_size, known=known)):
            if self.hash_of[b] is None:
                self._cache(b, h)
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None
                self.cached_free_blocks += self.hash_of[b] is not None

    # -- internals ---------------------------------------------------------------------------
    def _cache(self, block, h) -> None:
        self.hash_of[block] = h
        self.cached.setdefault(h, {})[block] = None

    def _evict(self, block) -> None:
        h = self.hash_of[block]
        if h is None:
            return
        self.hash_of[block] = None
        entry = self.cached[h]
        del entry[block]
        if entry:
            return                      # a duplicate still holds this prefix on the GPU
        del self.cached[h]
        self.evictions += 1
        if self.host_blocks:
            self.host[h] = None
            self.host.move_to_end(h)
            if len(self.host) > self.host_blocks:
                self.host.popitem(last=False)
                self.host_evictions += 1

    def check_invariants(self) -> None:
        assert all(self.ref[b] == 0 for b in self.free), "a used block is in the free queue"
        used = sum(1 for r in self.ref if r > 0)
        assert used + len(self.free) == self.num_blocks, "blocks lost"
        for h, entry in self.cached.items():
            for b in entry:
                assert self.hash_of[b] == h, "hash map and blocks disagree"
        assert len(self.host) <= self.host_blocks
        assert self.cached_free_blocks == sum(1 for b in self.free if self.hash_of[b] is not None)
