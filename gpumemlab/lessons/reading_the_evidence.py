"""Lesson 03, reading the evidence: its exercise (which segments' live tensors a program should
free, within a budget, so that ``empty_cache()`` hands back the most: c10
``release_cached_blocks`` returns only segments with no live block) and the program that makes
its state (gradient accumulation that keeps a small tensor of every micro-batch).
"""
from __future__ import annotations

import random

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import format_size, KiB, MiB
from gpumemlab.quizkit.predict_rules import question


# -- 03: read the evidence: which live tensors to free so that empty_cache() gives back the most
# The reasoning asked for is the one behind "non-releasable" memory: empty_cache() returns whole
# segments only (c10 release_cached_blocks frees a segment whose blocks are all free), so emptying
# a segment costs its live bytes and returns its whole size, and segments are independent. The
# best plan is a small knapsack read off the block map: large segments pinned by a few small
# tensors pay, small-pool segments (2 MiB) hardly do. The state has 18 segments worth emptying,
# so trying sets of them (2**18, each a fresh run of the program) is no way to the answer.
FREE_AT_MOST_03 = 16 * MiB      # the live tensors freed may add up to at most this
MICRO_BATCHES_03 = 40
SEED_03 = 3


def accumulate_and_log(card, micro_batches: int = MICRO_BATCHES_03, seed: int = SEED_03) -> list:
    """Lesson 03's exercise program on ``card``: six weights, then gradient accumulation over
    ``micro_batches``, each making an activation (2-9 MiB) and keeping one small tensor (its
    loss and logits for logging: under 1 MiB, or 1-4 MiB); the activations are freed at the end
    of the accumulation, the kept tensors stay. Returns the tensors still alive (weights and kept
    tensors), so that the caller holds them."""
    rng = random.Random(seed)
    held = [card.empty(rng.randint(12, 40) * MiB) for _ in range(6)]
    activations = []
    for _ in range(micro_batches):
        activations.append(card.empty(rng.randint(2, 9) * MiB + rng.randrange(0, 1 << 20, 512)))
        small = rng.random() < 0.4
        held.append(card.empty(rng.randrange(16, 1000) * KiB if small else
                               rng.randint(1, 3) * MiB + rng.randrange(0, 1 << 20, 512)))
    for t in activations:
        t.free()
    return held


def evidence_state():
    """Lesson 03's exercise state: ``accumulate_and_log`` on a fresh 8 GiB SimulatedGPU, default
    settings: (gpu, the tensors it holds)."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU("8GiB", alloc_conf="")
    return gpu, accumulate_and_log(gpu)


def returned_after_freeing(segments) -> tuple:
    """Free the live tensors of the evidence state's ``segments`` (their numbers in
    ``gml.text_blockmap``: address order), then ``empty_cache()``: (live bytes freed, bytes
    ``empty_cache()`` handed back)."""
    gpu, held = evidence_state()
    spans = [(s["address"], s["address"] + s["total_size"]) for s in gpu.memory_snapshot()]
    chosen = [spans[i] for i in segments]
    keep, freed = [], 0
    for t in held:
        if any(lo <= t.address < hi for lo, hi in chosen):
            freed += t.size
        else:
            keep.append(t)
    held[:] = keep
    before = gpu.memory_reserved()
    gpu.empty_cache()
    return freed, before - gpu.memory_reserved()


def most_returned(snapshot_segments, budget: int) -> int:
    """The most ``empty_cache()`` can hand back beyond what it returns anyway, freeing live
    bytes up to ``budget``: a knapsack over the segments that hold live blocks (cost: their live
    bytes, gain: their size), exact, by the live bytes spent."""
    best = {0: 0}                                  # bytes spent -> most returned for it
    for s in snapshot_segments:
        live = sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
        if not 0 < live <= budget:
            continue
        for spent, gain in list(best.items()):
            if spent + live <= budget and best.get(spent + live, -1) < gain + s["total_size"]:
                best[spent + live] = gain + s["total_size"]
    return max(best.values())


def _segment_numbers(answer) -> list:
    if not isinstance(answer, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in answer):
        raise AnswerShapeError("the answer is a list of segment numbers, as gml.text_blockmap "
                               "numbers them")
    return sorted(set(answer))


@exercise("03.ex", "which tensors to free so that empty_cache() returns the most",
          "Investigate the state that accumulate_and_log (lesson 03's exercise program) leaves on "
          "a fresh 8 GiB SimulatedGPU. The program may free live tensors adding up to at most "
          f"{format_size(FREE_AT_MOST_03)} before it calls empty_cache(). Which segments (their "
          "numbers in gml.text_blockmap) should it free every live tensor of, so that "
          "empty_cache() then hands back as much as it can beyond what it would with no tensor "
          "freed? Read it from the evidence of the state as it is: the snapshot's segments "
          "and blocks.",
          "a list of segment numbers, as gml.text_blockmap prints them",
          hints=("empty_cache() hands back only segments whose blocks are all free. What does "
                 "freeing some, but not all, of a segment's live tensors give back?",
                 "For each segment that holds live blocks: emptying it costs its live bytes and "
                 "returns its whole size, whatever the other segments do. A small-pool segment "
                 "returns 2 MiB at most.",
                 "Rank the segments by what they return per byte freed and take them while the "
                 "budget lasts; then see whether the budget left buys one more, or a swap buys "
                 "more."),
          stub=[])
def _judge_03(answer):
    segments = _segment_numbers(answer)
    gpu, _held = evidence_state()
    snap = gpu.memory_snapshot()
    if any(not 0 <= i < len(snap) for i in segments):
        return False, (f"the card has segments 0 to {len(snap) - 1}; "
                       f"{[i for i in segments if not 0 <= i < len(snap)]} are not among them"), {}
    idle = [i for i in segments if not any(b["state"] == "active_allocated"
                                           for b in snap[i]["blocks"])]
    best = most_returned(snap, FREE_AT_MOST_03)
    _, baseline = returned_after_freeing([])
    freed, returned = returned_after_freeing(segments)
    extra = returned - baseline
    figures = {"segments": segments, "freed": freed, "returned_extra": extra,
               "returned_without_frees": baseline}
    if not segments:
        return False, (f"with no tensor freed, empty_cache() hands back "
                       f"{format_size(baseline)}: name the segments to free"), figures
    if idle:
        return False, (f"segment(s) {idle} hold no live tensor: empty_cache() hands them back "
                       f"anyway, so naming them gains nothing (free blocks are not what it "
                       f"needs, empty segments are)"), figures
    if freed > FREE_AT_MOST_03:
        return False, (f"those segments hold {format_size(freed)} of live tensors, more than "
                       f"{format_size(FREE_AT_MOST_03)}"), figures
    small = [i for i in segments if snap[i]["segment_type"] == "small"]
    if extra < best:
        why = (f"freeing {format_size(freed)} makes empty_cache() hand back {format_size(extra)} "
               f"more, short of the {format_size(best)} more that "
               f"{format_size(FREE_AT_MOST_03)} of frees can buy")
        if small:
            why += (f"; segment(s) {small} are the small pool's: emptying one returns "
                    f"{format_size(snap[small[0]]['total_size'])} for what it cost")
        return False, why, figures
    return True, (f"freeing {format_size(freed)} of live tensors empties those segments, and "
                  f"empty_cache() hands back {format_size(extra)} more, the most the budget "
                  f"buys"), figures


# -- the lesson's predict questions (see why_a_cache)
question("03.p1", "number", unit="cudaMalloc calls")
question("03.p2", "choice", choices=("load_model", "forward", "backward", "optimizer_step"))
