"""``simulate_prefix``: serve a prefix-sharing workload through a prefix cache and count the reuse.

The schedule is deliberately simple, so that the cache alone decides the numbers: requests are
admitted first come, first served (a chat turn only once the turn before it has finished) while
fewer than ``max_running`` run and the cache can supply their blocks; a request takes blocks for
its prompt AND its output at admission, its prompt's blocks are cached right after (vLLM caches
full blocks once computed), and it finishes ``len(output)`` steps later, when all its full blocks
are cached and freed. Not modelled: growth during decode and preemption (see ``sim_paged`` for
those), chunked prefill, the time a prefill takes.

Policies: ``"vllm"`` (block hashes and an LRU free queue, ``prefix_cache.HashBlockPool``),
``"radix"`` (SGLang's token radix tree, ``radix_cache.RadixCache``), ``"none"`` (vLLM with
``enable_prefix_caching=False``: the same pool, nothing cached).
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from gpumemlab.units import format_size

from .prefix_cache import HashBlockPool
from .radix_cache import RadixCache
from .sizing import model_shape

POLICIES = ("vllm", "radix", "none")
_LOOKAHEAD = 64          # waiting requests scanned for one whose previous turn is done


@dataclass
class PrefixResult:
    policy: str
    workload: str
    block_size: int
    num_blocks: int
    requests: int
    prompt_tokens: int
    hit_tokens: int              # prompt tokens found on the GPU, not recomputed
    host_hit_tokens: int         # prompt tokens copied in from the CPU tier
    evicted_tokens: int          # cached tokens dropped from the GPU (blocks x block size)
    hashed_blocks: int           # block hashes computed (the bookkeeping prefix caching costs)
    mean_cached_bytes: float     # memory held by cached, unused blocks, mean over admissions
    steps: int
    mean_running: float
    block_bytes: int
    host_transfer_s: float       # time to copy the host hits in, at the given bandwidth
    hits_per_request: tuple = ()

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def host_hit_rate(self) -> float:
        return self.host_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens computed on the GPU (host hits are copied, not computed)."""
        return self.prompt_tokens - self.hit_tokens - self.host_hit_tokens

    def host_saving_s(self, prefill_tokens_per_s: float) -> float:
        """Seconds the CPU tier saves: recomputing its hits minus copying them in (< 0: it costs)."""
        return self.host_hit_tokens / prefill_tokens_per_s - self.host_transfer_s

    def __repr__(self) -> str:
        host = f", host {100 * self.host_hit_rate:.1f}%" if self.host_hit_tokens else ""
        return (f"PrefixResult({self.policy}, block {self.block_size}, {self.num_blocks} blocks: "
                f"hit rate {100 * self.hit_rate:.1f}%{host}, {self.evicted_tokens} tokens evicted, "
                f"cached {format_size(int(self.mean_cached_bytes))} on average)")


def simulate_prefix(workload, policy: str = "vllm", *, num_blocks: int = 4096, block_size: int = 16,
                    max_running: int = 32, host_blocks: int = 0, host_bandwidth: float = 25e9,
                    model="llama-3-8b") -> PrefixResult:
    """Serve ``workload`` (a ``PrefixWorkload``) with ``num_blocks`` KV blocks under ``policy``.

    ``host_blocks`` > 0 adds a CPU tier of that many blocks (vLLM policy only), whose hits are
    copied in at ``host_bandwidth`` bytes/s (25 GB/s: a PCIe 4 x16 link, roughly).
    """
    key = str(policy).lower()
    if key not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {list(POLICIES)}")
    for value, name, low in ((num_blocks, "num_blocks", 1), (block_size, "block_size", 1),
                             (max_running, "max_running", 1), (host_blocks, "host_blocks", 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if host_blocks and key != "vllm":
        raise ValueError("the CPU tier (host_blocks) is modelled for the vllm policy only")
    if not host_bandwidth > 0:
        raise ValueError(f"host_bandwidth must be positive bytes/s, got {host_bandwidth!r}")
    block_bytes = block_size * model_shape(model).kv_bytes_per_token
    reqs = workload.requests
    if key == "radix":
        cache = RadixCache(num_blocks * block_size)
    else:
        cache = HashBlockPool(num_blocks, block_size, host_blocks=host_blocks)
    bs, n = block_size, len(reqs)
    done = [False] * n
    waiting = deque(range(n))
    running: list = []
    hits = [0] * n
    hit_tokens = host_tokens = hashed = steps = finished = admissions = 0
    cached_sum = running_sum = 0.0
    step = 0
    while finished < n:
        while len(running) < max_running and waiting:
            rid = next((w for _, w in zip(range(_LOOKAHEAD), waiting)
                        if reqs[w].after < 0 or done[reqs[w].after]), None)
            if rid is None:
                break
            r = reqs[rid]
            if key == "radix":
                got = cache.admit(r.prompt, r.total)
            elif key == "none":
                got = cache.admit((), r.total)
            else:
                got = cache.admit(r.prompt, r.total)
            if got is None:
                if not running:
                    raise ValueError(f"request {rid} ({r.total} tokens) does not fit in "
                                     f"{num_blocks} blocks of {bs} tokens even with the cache empty")
                break
            waiting.remove(rid)
            if key == "radix":
                handle, hit = got
                cache.cache_prompt(handle, r.prompt)
            else:
                blocks, gpu_hits, host_hits, hashes = got
                hit, handle = gpu_hits * bs, (blocks, hashes)
                host_tokens += host_hits * bs
                if key == "vllm":
                    hashed += len(hashes)
                    cache.cache_prompt(blocks, hashes)
            hits[rid] = hit
            hit_tokens += hit
            heapq.heappush(running, (step + len(r.output), rid, handle))
            admissions += 1
            running_sum += len(running)
            cached_sum += (cache.cached_free_tokens * (block_bytes / bs) if key == "radix"
                           else cache.cached_free_blocks * block_bytes)
        t, rid, handle = heapq.heappop(running)
        step = t
        r = reqs[rid]
        if key == "radix":
            cache.release(handle, r.prompt + r.output)
        elif key == "none":
            cache.release(handle[0], ())
        else:
            hashed += (r.total // bs) - (len(r.prompt) // bs)
            cache.release(handle[0], r.prompt + r.output, known=handle[1])
        done[rid] = True
        finished += 1
    steps = step
    evicted = cache.evicted_tokens if key == "radix" else cache.evictions * bs
    return PrefixResult(key, workload.name, bs, num_blocks, n, workload.prompt_tokens, hit_tokens,
                        host_tokens, evicted, hashed, cached_sum / max(1, admissions), steps,
                        running_sum / max(1, admissions), block_bytes,
                        host_tokens // bs * block_bytes / host_bandwidth, tuple(hits))
