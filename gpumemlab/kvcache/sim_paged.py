"""Serving with a paged KV cache: vLLM's block-on-demand allocation, with preemption by recompute.

Models vLLM's scheduler and block manager (paper §4.2, §4.5; V0 ``Scheduler._schedule`` and
``BlockSpaceManager``): KV memory is ``num_blocks`` blocks of ``block_size`` token slots, allocated
up front as one buffer. A running sequence takes a new block only when it writes the first token
of a block. Each step, the running sequences grow first; if blocks run out, the most recently
admitted sequence is preempted (all its blocks freed, it rejoins the FRONT of the queue and later
re-prefills prompt + generated tokens: recomputation, vLLM's default). Then, if nobody was preempted
this step, waiting requests are admitted first come, first served while ``free - needed >= watermark``
(vLLM keeps 1% of blocks free against immediate preemption).

Aggregate accounting keeps this O(1) per step: a sequence admitted at step ``s0`` with ``L0`` tokens
needs a block at step ``s`` iff ``(L0 - s0 + s) % block_size == 0``, so a per-phase counter says how
many sequences need a block this step, without visiting each sequence.
"""
from __future__ import annotations

from collections import deque

from .accounting import Accumulator


def run_paged(workload, kv_memory_bytes: int, bytes_per_token: int, *, block_size: int,
              max_num_seqs: int, watermark: float = 0.01) -> dict:
    """Serve ``workload`` from paged KV memory; return the accumulator and counters."""
    bs = block_size
    block_bytes = bs * bytes_per_token
    num_blocks = kv_memory_bytes // block_bytes
    watermark_blocks = int(watermark * num_blocks)
    original = workload.prompt_lens.tolist()
    prompts = list(original)                       # becomes prompt + generated after a preemption
    totals = (workload.prompt_lens + workload.output_lens).tolist()
    arrivals = workload.arrival_steps.tolist()
    longest = max(totals)
    if -(-longest // bs) > num_blocks - watermark_blocks:
        raise ValueError(f"kv_memory of {kv_memory_bytes} bytes ({num_blocks} blocks of {bs} tokens) "
                         f"cannot hold a {longest}-token request")
    n = len(prompts)
    acc = Accumulator()
    free = num_blocks
    phase = [0] * bs               # running sequences by (L0 - s0) % bs
    running = {}                   # id -> (s0, L0); insertion order = admission order
    epoch = [0] * n                # bumps on preemption, so stale events are skipped
    finish_at: dict = {}           # step -> [(id, epoch)]: the last step the sequence writes
    last_block_at: dict = {}       # step -> [(id, epoch)]: from then on it holds its final block
    in_last = {}                   # id -> never-used slots of its final block
    never_used = 0                 # sum of in_last values (slots)
    tokens = 0                     # slots holding written tokens
    waiting = deque()
    next_arrival = finished = decode_tokens = prefill_tokens = preemptions = max_batch = 0
    recomputed_tokens = 0
    step = 0
    while finished < n:
        while next_arrival < n and arrivals[next_arrival] <= step:
            waiting.append(next_arrival)
            next_arrival += 1
        if not running and not waiting:
            step = arrivals[next_arrival]
            continue
        # 1. running sequences that start a new block this step; preempt the newest if short
        need = phase[-step % bs]
        preempted = False
        while need > free:
            rid, (s0, l0) = running.popitem()
            length = l0 + step - s0
            phase[(l0 - s0) % bs] -= 1
            if length % bs == 0:
                need -= 1
            free += -(-length // bs)
            tokens -= length
            never_used -= in_last.pop(rid, 0)
            epoch[rid] += 1
            prompts[rid] = length
            waiting.appendleft(rid)
            preemptions += 1
            preempted = True
        free -= need
        # 2. admission, first come first served, unless this step preempted
        while not preempted and waiting and len(running) < max_num_seqs:
            rid = waiting[0]
            l0 = prompts[rid]
            blocks = -(-(l0 + 1) // bs)            # the prompt and the slot of its first new token
            if free - blocks < watermark_blocks:
                break
            waiting.popleft()
            free -= blocks
            running[rid] = (step, l0)
            phase[(l0 - step) % bs] += 1
            tokens += l0
            prefill_tokens += l0
            if l0 != original[rid]:
                recomputed_tokens += l0
            finish_at.setdefault(step + totals[rid] - l0 - 1, []).append((rid, epoch[rid]))
            final_blocks = -(-totals[rid] // bs)
            enter = step + max(0, (final_blocks - 1) * bs - l0)
            last_block_at.setdefault(enter, []).append((rid, epoch[rid]))
        for rid, ep in last_block_at.pop(step, ()):
            if ep == epoch[rid] and rid in running:
                waste = -totals[rid] % bs
                in_last[rid] = waste
                never_used += waste
        # 3. account this step; every running sequence writes one token
        batch = len(running)
        max_batch = max(max_batch, batch)
        used_slots = (num_blocks - free) * bs
        acc.add(1, bool(waiting), token_states=tokens * bytes_per_token, token_slope=0,
                reserved_plus_tokens=(used_slots - never_used) * bytes_per_token,
                internal=never_used * bytes_per_token, external=0,
                unused=kv_memory_bytes - used_slots * bytes_per_token, batch=batch)
        tokens += batch
        decode_tokens += batch
        for rid, ep in finish_at.pop(step, ()):
            if ep == epoch[rid] and rid in running:
                s0, l0 = running.pop(rid)
                phase[(l0 - s0) % bs] -= 1
                tokens -= totals[rid]
                free += -(-totals[rid] // bs)
                never_used -= in_last.pop(rid, 0)
                finished += 1
        step += 1
    return {"acc": acc, "steps": step, "decode_tokens": decode_tokens,
            "prefill_tokens": prefill_tokens, "recomputed_tokens": recomputed_tokens,
            "preemptions": preemptions, "max_batch": max_batch, "num_blocks": num_blocks,
            "failed_allocations": 0, "memory": None}
