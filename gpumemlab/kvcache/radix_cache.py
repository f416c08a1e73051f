"""Prefix caching in a radix tree at token granularity, as SGLang's RadixAttention does it.

Models ``sglang/srt/mem_cache/radix_cache.py`` (Zheng et al., *SGLang*, arXiv:2312.07104, §3) with a
page size of 1 token: the KV cache of every finished (and running) request stays in a radix tree
whose edges are token sequences; a new request reuses the longest matching token prefix (at most
its prompt minus one token), an edge matched part-way is split; the nodes a running request uses
are locked (reference counts up to the root); when memory runs short, unlocked LEAVES are evicted
least recently used first, and a parent left childless becomes a leaf in turn. A request's prompt
is inserted after its prefill, the whole sequence when it finishes; tokens another request
inserted meanwhile are found in the tree and the request's own copies freed.

Capacity is counted in token slots (``num_blocks x block_size`` to compare with block caches).
Not modelled: SGLang's hierarchical (host) cache, cache-aware scheduling order, page sizes > 1.
"""
from __future__ import annotations

import heapq


class _Node:
    __slots__ = ("key", "children", "parent", "lock", "last")

    def __init__(self, key, parent):
        self.key, self.parent, self.children, self.lock, self.last = key, parent, {}, 0, 0


class RadixCache:
    """A token-level prefix cache of ``capacity`` token slots."""

    def __init__(self, capacity: int):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1 token, got {capacity!r}")
        self.capacity = capacity
        self.root = _Node((), None)
        self.root.lock = 1                 # never evicted
        self.tree_tokens = 0               # tokens stored in the tree
        self.locked_tokens = 0             # ... of which running requests use
        self.owned_tokens = 0              # tokens running requests hold outside the tree
        self.evicted_tokens = 0
        self._clock = 0

    @property
    def used(self) -> int:
        return self.tree_tokens + self.owned_tokens

    @property
    def cached_free_tokens(self) -> int:
        """Tree tokens no running request uses (reusable on a hit, evictable)."""
        return self.tree_tokens - self.locked_tokens

    # -- tree walking ------------------------------------------------------------------------
    def _walk(self, tokens, insert: bool):
        """Follow ``tokens`` from the root; split a part-matched edge. Returns (node, matched, new)."""
        self._clock += 1
        node, i, n = self.root, 0, len(tokens)
        while i < n:
            child = node.children.get(tokens[i])
            if child is None:
                if not insert:
                    break
                leaf = _Node(tuple(tokens[i:]), node)
                leaf.last = self._clock
                node.children[tokens[i]] = leaf
                self.tree_tokens += n - i
                return leaf, i, n - i
            key = child.key
            p, m = 0, min(len(key), n - i)
            while p < m and key[p] == tokens[i + p]:
                p += 1
            if p < len(key):
                child = self._split(child, p)
            child.last = self._clock
            node, i = child, i + p
            if p < len(key) and not insert:
                break
        return node, i, 0

    def _split(self, child, p):
        parent = _Node(child.key[:p], child.parent)
        parent.lock, parent.last = child.lock, child.last
        parent.parent.children[child.key[0]] = parent
        child.key = child.key[p:]
        child.parent = parent
        parent.children[child.key[0]] = child
        return parent

    def _lock(self, node, delta: int) -> None:
        while node is not self.root:
            if delta > 0 and node.lock == 0:
                self.locked_tokens += len(node.key)
            node.lock += delta
            if delta < 0 and node.lock == 0:
                self.locked_tokens -= len(node.key)
            node = node.parent

    # -- a request's life --------------------------------------------------------------------
    def admit(self, prompt, total_len: int):
        """Room for a request; None if it cannot be had now. Returns ``(handle, hit_tokens)``."""
        node, hit, _ = self._walk(prompt[:max(0, len(prompt) - 1)], insert=False)
        need = total_len - hit
        self._lock(node, +1)
        if self.capacity - self.used < need:
            self.evict(need - (self.capacity - self.used))
            if self.capacity - self.used < need:
                self._lock(node, -1)
                return None
        self.owned_tokens += need
        return [node, need, hit], hit      # [locked node, tokens owned, tokens in the tree]

    def _insert(self, handle, tokens) -> None:
        node, _, new = self._walk(tokens, insert=True)
        fresh = len(tokens) - handle[2]      # our tokens not yet counted in the tree
        # ``new`` of them joined the tree; the rest were put there meanwhile by another request,
        # so our copies are freed. Either way they are no longer ours.
        assert 0 <= new <= fresh
        self.owned_tokens -= fresh
        handle[1] -= fresh
        handle[2] = len(tokens)
        self._lock(node, +1)
        self._lock(handle[0], -1)
        handle[0] = node

    def cache_prompt(self, handle, prompt) -> None:
        """After the prefill: the prompt joins the tree (SGLang ``cache_unfinished_req``)."""
        self._insert(handle, prompt)

    def release(self, handle, tokens) -> None:
        """The request finished: all its tokens join the tree, then its lock goes."""
        self._insert(handle, tokens)
        self.owned_tokens -= handle[1]
        handle[1] = 0
        self._lock(handle[0], -1)

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked leaves, least recently used first, until ``num_tokens`` are freed."""
        heap, freed = [], 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            if not node.children and node.lock == 0:
                heap.append((node.last, id(node), node))
            stack.extend(node.children.values())
        heapq.heapify(heap)
        while heap and freed < num_tokens:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.tree_tokens -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.last, id(parent), parent))
        self.evicted_tokens += freed
        return freed

    def check_invariants(self) -> None:
        total = locked = 0
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            total += len(node.key)
            locked += len(node.key) if node.lock else 0
            assert node.lock >= 0 and node.key, "bad node"
            stack.extend(node.children.values())
        assert total == self.tree_tokens and locked == self.locked_tokens
        assert 0 <= self.owned_tokens and self.used <= self.capacity
