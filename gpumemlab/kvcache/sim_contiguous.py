"""Serving with contiguous per-request KV buffers: FasterTransformer-like static batches and Orca.

Models iteration-level (continuous) batching of Orca (Yu et al., OSDI'22) as vLLM's §6.1 re-implements
it, and FasterTransformer's request-level batching: each admitted request gets ONE contiguous buffer
for its reserved slots from the simulated GPU's caching allocator, held until it finishes (static:
until its whole batch finishes). Requests are admitted first come, first served; when the allocator
refuses the head request, it waits until some buffer is freed. No reservation ever grows, so there
is no preemption. Between events (an arrival, a finish) every step is alike, so the loop jumps from
event to event and sums the steps in between in closed form.
"""
from __future__ import annotations

import heapq
from collections import deque

from .accounting import Accumulator
from .kv_memory import AllocatorKVMemory
from .strategies import reserved_slots


def run_contiguous(strategy: str, workload, kv_memory_bytes: int, bytes_per_token: int, *,
                   max_num_seqs: int, alloc_conf: str = "") -> dict:
    """Serve ``workload``; return the accumulator and counters (see ``simulator.simulate``)."""
    prompts = workload.prompt_lens.tolist()
    totals = (workload.prompt_lens + workload.output_lens).tolist()
    outputs = workload.output_lens.tolist()
    arrivals = workload.arrival_steps.tolist()
    slots = reserved_slots(strategy, workload.prompt_lens + workload.output_lens,
                           workload.max_seq_len).tolist()
    biggest = max(slots) * bytes_per_token
    if biggest > kv_memory_bytes:
        raise ValueError(f"kv_memory of {kv_memory_bytes} bytes cannot hold even one reservation "
                         f"of {biggest} bytes under {strategy!r}")
    static = strategy == "static"
    mem = AllocatorKVMemory(kv_memory_bytes, alloc_conf)
    acc = Accumulator()
    n = len(prompts)
    waiting = deque()
    finishing = []            # heap of (last step, request id)
    buffers = {}              # request id -> allocator buffer
    held_bytes = 0            # sum of buffer sizes (rounded)
    useful_bytes = 0          # sum over holders of min(reserved, true length) x bytes/token
    tokens = 0                # token slots written by live requests
    running = 0
    blocked_need = None       # bytes the refused head request asked for; None = try again
    next_arrival = finished = decode_tokens = prefill_tokens = max_batch = 0
    step = 0
    while finished < n:
        while next_arrival < n and arrivals[next_arrival] <= step:
            waiting.append(next_arrival)
            next_arrival += 1
        if running == 0 and not waiting:          # idle until the next arrival
            step = arrivals[next_arrival]
            continue
        may_admit = not (static and buffers)     # a static batch admits only when empty
        while may_admit and waiting and blocked_need is None and running < max_num_seqs:
            rid = waiting[0]
            nbytes = slots[rid] * bytes_per_token
            buf = mem.alloc(nbytes)
            if buf is None:
                blocked_need = nbytes
                break
            waiting.popleft()
            buffers[rid] = buf
            held_bytes += buf.size
            useful_bytes += min(slots[rid], totals[rid]) * bytes_per_token
            tokens += prompts[rid]
            prefill_tokens += prompts[rid]
            running += 1
            heapq.heappush(finishing, (step + outputs[rid] - 1, rid))
        max_batch = max(max_batch, running)
        # Steps step..k-1 look alike: up to the next finish, or the next arrival if the queue is empty.
        end = finishing[0][0] + 1
        if not waiting and next_arrival < n:
            end = min(end, arrivals[next_arrival])
        k = max(end - step, 1)
        free_bytes = kv_memory_bytes - held_bytes
        fragmented = bool(waiting) and blocked_need is not None and blocked_need <= free_bytes
        acc.add(k, bool(waiting), token_states=tokens * bytes_per_token,
                token_slope=running * bytes_per_token, reserved_plus_tokens=useful_bytes,
                internal=held_bytes - useful_bytes,
                external=free_bytes if fragmented else 0, unused=0 if fragmented else free_bytes,
                batch=running, cached_free=mem.reserved_bytes() - held_bytes)
        tokens += running * k
        decode_tokens += running * k
        step += k
        while finishing and finishing[0][0] < step:
            _, rid = heapq.heappop(finishing)
            tokens -= totals[rid]
            running -= 1
            finished += 1
            useful_bytes -= min(slots[rid], totals[rid]) * bytes_per_token
            if not static:
                held_bytes -= buffers[rid].size
                mem.free(buffers.pop(rid))
                blocked_need = None
        if static and running == 0 and buffers:   # the batch is done: release every buffer
            for buf in buffers.values():
                mem.free(buf)
            buffers.clear()
            held_bytes = 0
            blocked_need = None
    return {"acc": acc, "steps": step, "decode_tokens": decode_tokens,
            "prefill_tokens": prefill_tokens, "preemptions": 0, "max_batch": max_batch,
            "failed_allocations": mem.failed_allocations, "memory": mem}
