"""Lesson 08, the paged KV cache: its exercise (size the KV cache blocks for a workload the lesson
does not sweep: short Alpaca-like requests) and its
selftest workloads ``kv_contiguous`` / ``kv_paged`` (one request stream served from
per-request contiguous KV buffers of exact length, or from one pool of blocks).
"""
from __future__ import annotations

import random

from gpumemlab.devices.scenarios import ScenarioRun, mib_round
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 08: size the KV cache blocks for a workload the lesson does not sweep
WASTE_LIMIT_08 = 0.05


def waste_08(block_size: int) -> float:
    """Share of KV memory lost to reserved-but-empty and internally fragmented slots when the
    exercise's workload (400 Alpaca-like requests, seed 0, OPT-13B, 12 GiB: short instructions,
    where the lesson sweeps long ShareGPT chats) is served paged with ``block_size`` tokens a
    block."""
    from gpumemlab.kvcache.simulator import simulate
    from gpumemlab.kvcache.workloads import alpaca_like

    shares = simulate("paged", alpaca_like(400, seed=0), "12GiB", model="opt-13b",
                      block_size=block_size).shares
    return shares["reserved"] + shares["internal_fragmentation"]


@exercise("08.ex", "size the KV cache blocks for short requests",
          "The lesson swept block sizes for long ShareGPT-like chats. Now serve 400 Alpaca-like "
          "requests (kv.alpaca_like(400, seed=0): short instructions, about 19 tokens in and 58 "
          "out) paged, OPT-13B, 12 GiB of KV memory: choose the LARGEST block size, a power of "
          "two from 1 to 256 tokens, for which the slots held but not filled (reserved + "
          "internal fragmentation) stay below 5 % of the KV memory. Larger blocks mean shorter "
          "block tables and more efficient attention kernels.",
          "a power of two from 1 to 256 (tokens per block)",
          hints=("A request wastes at most one partly filled block, its last one: about half a "
                 "block on average.",
                 "So the waste is about (block size / 2) / (mean request length): the chats of "
                 "the sweep are about 500 tokens long, these requests about 78.",
                 "Check your estimate: kv.simulate('paged', kv.alpaca_like(400, seed=0), "
                 "'12GiB', block_size=b).shares."),
          stub=256)
def _judge_08(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or answer < 1 or answer > 256 \
            or answer & (answer - 1):
        raise AnswerShapeError("the answer must be a power of two from 1 to 256")
    waste = waste_08(answer)
    bigger = waste_08(2 * answer) if waste < WASTE_LIMIT_08 and answer < 256 else None
    figures = {"block_size": answer, "waste_share": waste, "double_block_waste_share": bigger}
    if waste >= WASTE_LIMIT_08:
        return False, (f"with {answer}-token blocks {100 * waste:.1f} % of the KV memory is held "
                       f"but not filled: above 5 %"), figures
    if bigger is not None and bigger < WASTE_LIMIT_08:
        return False, (f"{answer}-token blocks waste {100 * waste:.1f} %, and {2 * answer}-token "
                       f"blocks still only {100 * bigger:.1f} %: a larger block size fits"), figures
    return True, (f"{answer}-token blocks waste {100 * waste:.1f} %" +
                  (f"; {2 * answer} would waste {100 * bigger:.1f} %" if bigger is not None
                   else "")), figures


# -- the selftest workloads (run on the simulator and, with CUDA, on the real card)
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
    run = ScenarioRun(gpu, "kv_contiguous")
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
    run = ScenarioRun(gpu, "kv_paged")
    block = block_tokens * per_token
    blocks = mib_round(gpu.total_memory * 9 // 10) // block
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


# -- the lesson's predict questions (see why_a_cache)
question("08.p1", "size", misconceptions=(
    Misconception(lambda a: a // 2, "Half of it: every layer keeps a key AND a value vector "
                  "per token."),
    Misconception(lambda a: a * 2, "Twice too much: fp16 values take 2 bytes, not 4."),
))
question("08.p2", "number", unit="%", tolerance=0.05, tolerance_why="shown to one decimal",
         misconceptions=(
             Misconception(lambda a: 100, "Not all of it, even paged: each request's last block "
                           "is only partly filled, and the table's other columns show what "
                           "else holds no token state."),
         ))
