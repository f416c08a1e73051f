"""The lessons' experiments as seeded workloads for any device with the torch.cuda-shaped API
(``SimulatedGPU``, ``CudaGPU``), like ``scenarios``: only ``gpu.empty``, ``free``,
``empty_cache``, ``set_per_process_memory_fraction`` and the memory queries, so one workload tells
one allocator story on the model and on a real card. Sizes scale with ``gpu.total_memory`` (a
CudaGPU's budget); each returns a :class:`~gpumemlab.devices.scenarios.ScenarioRecord`.

* ``cache_reuse`` (lesson 01): a loop that frees and re-allocates the same tensors asks the
  driver for segments only in its first step (c10 ``get_free_block`` reuses cached blocks).
* ``empty_cache_story`` (04): ``release_cached_blocks`` returns whole free segments only: a live
  byte pins its segment, and a fragmented segment keeps its holes, so the OOM stays.
* ``big_then_small`` (05): a big cached block nibbled by small tensors, then the big request
  again: with ``max_split_size_mb`` the big block is oversize and is not split.
* ``growing`` (05): tensors that grow each step under a memory fraction; with
  ``garbage_collection_threshold`` old cache goes before the limit, without OOM-path retries.
* ``variable_lengths`` (05): seeded sequence lengths, about six tensors alive; the setting to
  try is ``roundup_power2_divisions``.
* ``activations`` (07): a layered forward and backward that keeps every activation, or (with
  ``checkpoint=True``) only each layer's input, recomputing the rest in backward.
* ``kv_contiguous`` / ``kv_paged`` (08): one request stream served from per-request contiguous
  KV buffers of exact length (holes between finished requests), or from one pool of blocks.
"""
from __future__ import annotations

import random

from .scenarios import MiB, _chunk, _Run

__all__ = ["cache_reuse", "empty_cache_story", "big_then_small", "growing", "variable_lengths",
           "activations", "kv_contiguous", "kv_paged"]

KiB = 1024
_ROUND = 2 * MiB        # kRoundLarge


def _mib_round(n: int) -> int:
    return max(_ROUND, n // _ROUND * _ROUND)


def cache_reuse(gpu, *, steps: int = 5, release: bool = True):
    """Each step: a 1-byte tensor (small pool), 1 MiB + 1 byte (large pool, a 20 MiB segment)
    and 1/16 of the device, all freed at the end of the step."""
    run = _Run(gpu, "cache_reuse")
    sizes = (1, MiB + 1, _chunk(gpu, 16))
    for step in range(steps):
        for i, n in enumerate(sizes):
            run.alloc(i, n, f"step {step}: tensor {i}")
        for i in range(len(sizes)):
            run.free(i, f"step {step}: tensor {i} freed")
    run.rec.notes.update(sizes=list(sizes), steps=steps)
    return run.finish(release)


def empty_cache_story(gpu, *, release: bool = True):
    """Three freed tensors in three segments, then ``empty_cache()``; one live byte and
    ``empty_cache()``; a fragmented segment, ``empty_cache()`` and a request bigger than any
    hole. ``notes["reserved_after_empty_cache"]`` has reserved bytes after each call."""
    run = _Run(gpu, "empty_cache_story")
    chunk = _chunk(gpu, 16)
    after = []
    for i, n in enumerate((3 * chunk, 2 * chunk, 4 * MiB)):
        run.alloc(("whole", i), n, f"tensor {i} in a segment of its own")
    for i in range(3):
        run.free(("whole", i), f"tensor {i} freed: its segment stays cached")
    run.act("empty_cache(): whole free segments go back", gpu.empty_cache)
    after.append(gpu.memory_reserved())
    run.alloc("byte", 1, "one live byte in a small-pool segment")
    run.act("empty_cache(): the byte pins its segment", gpu.empty_cache)
    after.append(gpu.memory_reserved())
    run.free("byte", "the byte freed")
    run.alloc("big", 14 * chunk, "one big tensor (its segment will be reused)")
    run.free("big", "free it: the segment stays cached")
    for i in range(14):
        run.alloc(i, chunk, f"piece {i}")
    for i in range(0, 14, 2):
        run.free(i, f"free piece {i}: a hole")
    run.act("empty_cache(): the holes sit in a segment with live blocks", gpu.empty_cache)
    after.append(gpu.memory_reserved())
    run.alloc("request", 3 * chunk, "a tensor three pieces long")
    run.rec.notes.update(chunk=chunk, reserved_after_empty_cache=after)
    return run.finish(release)


def big_then_small(gpu, *, release: bool = True):
    """Two thirds of the device as one tensor, freed; four tensors of 1/30 each; the big
    request again. With defaults the small ones are carved from the cached block, which is then
    too short, and its segment cannot be released: OOM. ``max_split_size_mb`` of a third of
    the device (see ``max_split_conf``) keeps the big block whole."""
    run = _Run(gpu, "big_then_small")
    big = _mib_round(gpu.total_memory * 2 // 3)
    small = _mib_round(gpu.total_memory // 30)
    run.alloc("big", big, "a big tensor")
    run.free("big", "freed: cached")
    for i in range(4):
        run.alloc(i, small, f"small tensor {i}")
    run.alloc("again", big, "the big tensor again")
    run.rec.notes.update(big=big, small=small)
    return run.finish(release)


def max_split_conf(total_memory: int) -> str:
    """The ``max_split_size_mb`` setting ``big_then_small`` is built for: a third of the device."""
    return f"max_split_size_mb:{max(21, total_memory // 3 // MiB)}"


def growing(gpu, *, steps: int = 30, fraction: float = 0.5, release: bool = True):
    """Cap the device at ``fraction``; each step two tensors of a size that grows, freed at
    once (lesson 05's growing sequence length, scaled from its 8 GiB card)."""
    run = _Run(gpu, "growing")
    run.act(f"set_per_process_memory_fraction({fraction})", gpu.set_per_process_memory_fraction,
            fraction)
    scale = gpu.total_memory / (8 * 1024 * MiB)
    for step in range(steps):
        size = _mib_round(int((200 + 60 * step) * MiB * scale))
        for i in range(2):
            run.alloc(i, size, f"step {step}: tensor {i}")
        for i in range(2):
            run.free(i, f"step {step}: tensor {i} freed")
    run.act("set_per_process_memory_fraction(1.0)", gpu.set_per_process_memory_fraction, 1.0)
    return run.finish(release)


def variable_lengths(gpu, *, count: int = 300, seed: int = 0, release: bool = True):
    """``count`` tensors of a seeded sequence length each (64 to 2048 tokens of 1/131072 of the
    device, plus up to 4 KiB); after each, if more than six are alive, a random one is freed."""
    rng = random.Random(seed)
    run = _Run(gpu, "variable_lengths")
    per_token = max(4 * KiB, gpu.total_memory // (128 * 1024) // 512 * 512)
    alive = []
    for k in range(count):
        n = rng.randint(64, 2048) * per_token + rng.randint(0, 4095)
        run.alloc(k, n, f"tensor {k}")
        alive.append(k)
        if len(alive) > 6:
            run.free(alive.pop(rng.randrange(len(alive))), "a random one freed")
    run.rec.notes.update(per_token=per_token)
    return run.finish(release)


def activations(gpu, *, checkpoint: bool = False, layers: int = 8, per_layer: int = 3,
                seed: int = 0, release: bool = True):
    """Weights (1/16 of the device); forward: each layer makes ``per_layer`` internal
    activations and an output (about 1/24 of the device each); without checkpointing all are
    kept for backward, with it only the layer outputs are, and the internals are freed at once
    and recomputed layer by layer in backward. Backward frees them as the gradients pass."""
    rng = random.Random(seed)
    run = _Run(gpu, "activations_checkpointed" if checkpoint else "activations")
    unit = gpu.total_memory // 24
    size = [[unit + rng.randrange(0, unit // 8, 512) for _ in range(per_layer + 1)]
            for _ in range(layers)]
    run.alloc("w", _chunk(gpu, 16), "weights")
    if not _forward_backward(run, size, per_layer, checkpoint):
        for key in [k for k in run.live if k != "w"]:     # the OOM unwinds the step
            run.free(key, "the OOM ends the step: its tensors are freed")
    run.rec.notes.update(checkpoint=checkpoint, activation_bytes=sum(map(sum, size)),
                         peak_allocated=gpu.max_memory_allocated())
    return run.finish(release)


def _forward_backward(run, size, per_layer, checkpoint) -> bool:
    """One training step of ``activations``; False at the first OOM."""
    layers = len(size)
    for i in range(layers):
        for j in range(per_layer):
            if not run.alloc(("in", i, j), size[i][j], f"forward layer {i}: internal {j}"):
                return False
        if not run.alloc(("out", i), size[i][per_layer], f"forward layer {i}: output"):
            return False
        if checkpoint:
            for j in range(per_layer):
                run.free(("in", i, j), f"forward layer {i}: internal {j} dropped (checkpoint)")
    for i in reversed(range(layers)):
        if checkpoint:
            for j in range(per_layer):
                if not run.alloc(("in", i, j), size[i][j], f"backward layer {i}: internal {j} recomputed"):
                    return False
        if not run.alloc("grad", size[i][per_layer], f"backward layer {i}: gradient of its input"):
            return False
        for j in reversed(range(per_layer)):
            run.free(("in", i, j), f"backward layer {i}: internal {j} freed")
        run.free(("out", i), f"backward layer {i}: output freed")
        run.free("grad", f"backward layer {i}: gradient passed on")
    return True


def _requests(gpu, count, seed):
    """(token count, KV bytes per token, longest) of a seeded request stream: 64 to 2048 tokens,
    sized so that the longest request needs about 1/10 of the device."""
    rng = random.Random(seed)
    per_token = max(512, gpu.total_memory // 10 // 2048 // 512 * 512)
    return [rng.randint(64, 2048) for _ in range(count)], per_token


def kv_contiguous(gpu, *, count: int = 60, seed: int = 0, release: bool = True):
    """Each request gets one contiguous KV buffer for its length rounded up to a power of two
    (Orca's Pow2 reservation: it cannot know how long the answer will be). Requests are admitted first come, first served; when the next one does not
    fit (an OOM), the oldest running one finishes and frees its buffer, and it is tried again.
    ``notes["max_running"]`` is the most requests that ran at once."""
    lengths, per_token = _requests(gpu, count, seed)
    run = _Run(gpu, "kv_contiguous")
    running, most = [], 0
    for r, n in enumerate(lengths):
        slots = 1 << (n - 1).bit_length()
        while not run.alloc(r, slots * per_token, f"request {r}: KV buffer of {slots} slots for {n} tokens"):
            if not running:
                break
            run.free(running.pop(0), "the oldest request finishes")
        else:
            running.append(r)
        most = max(most, len(running))
    run.rec.notes.update(max_running=most, per_token=per_token)
    return run.finish(release)


def kv_paged(gpu, *, count: int = 60, seed: int = 0, block_tokens: int = 16, release: bool = True):
    """The same stream from one pool of 16-token blocks (vLLM): the pool (90% of the device) is
    allocated once; a request takes the blocks it needs from a free list, no allocator call.
    ``notes["max_running"]`` is the most requests that ran at once."""
    lengths, per_token = _requests(gpu, count, seed)
    run = _Run(gpu, "kv_paged")
    block = block_tokens * per_token
    blocks = _mib_round(gpu.total_memory * 9 // 10) // block
    run.alloc("pool", blocks * block, f"the KV pool: {blocks} blocks of {block_tokens} tokens")
    free, running, most = blocks, [], 0
    for n in lengths:
        need = -(-n // block_tokens)
        while need > free and running:
            free += running.pop(0)
        free -= need
        running.append(need)
        most = max(most, len(running))
    run.rec.notes.update(max_running=most, per_token=per_token, blocks=blocks)
    return run.finish(release)
