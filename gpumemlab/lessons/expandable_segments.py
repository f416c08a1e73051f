"""Lesson 06, expandable segments: its exercise (which tensors of one expandable segment to free,
within a budget, so that ``empty_cache()`` unmaps the most pages: c10's
``release_cached_blocks`` unmaps a page of an expandable segment only when no live block
touches it).
"""
from __future__ import annotations

import random

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 06: which tensors to free so that empty_cache() unmaps the most of an expandable segment
# The reasoning asked for: an expandable segment is mapped in 20 MiB pages and empty_cache()
# unmaps the pages that are wholly free; a freed tensor's bytes come back only as the whole pages
# inside the free range around it, so freeing neighbours together also frees the pages they
# shared, and a tensor smaller than a page may return nothing alone. The best plan is read off
# the addresses (a knapsack over runs of neighbouring tensors); 40 tensors make 2**40 sets.
PAGE_06 = 20 * MiB
_rng = random.Random(6)
SIZES_06 = tuple(_rng.randint(8, 60) * MiB + _rng.randrange(0, 1 << 20, 512) for _ in range(40))
del _rng
LAST_06 = 40 * MiB              # made after them and kept: the segment's end is not free
FREE_AT_MOST_06 = 200 * MiB     # the tensors freed may add up to at most this
CONF_06 = "expandable_segments:True"


def segment_06():
    """Lesson 06's exercise state: ``SIZES_06`` (40 sizes) allocated in order on a fresh 2 GiB
    SimulatedGPU under ``expandable_segments:True`` (one growing segment, back to back), then a
    ``LAST_06`` tensor that the program keeps: (gpu, the 40 tensors, the last one)."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU("2GiB", alloc_conf=CONF_06)
    tensors = [gpu.empty(n) for n in SIZES_06]
    return gpu, tensors, gpu.empty(LAST_06)


def unmapped_after_freeing(chosen) -> int:
    """Free the tensors numbered ``chosen``, then ``empty_cache()``: the bytes unmapped."""
    gpu, tensors, _last = segment_06()
    for i in set(chosen):
        tensors[i].free()
    before = gpu.memory_reserved()
    gpu.empty_cache()
    return before - gpu.memory_reserved()


def best_plan_06() -> tuple:
    """The most ``empty_cache()`` can unmap freeing at most ``FREE_AT_MOST_06``, and a plan that
    does it: runs of neighbouring tensors, each returning the whole pages between its first
    tensor's address and the address of the tensor after it. Exact: a frontier of (bytes freed,
    bytes unmapped) plans, position by position."""
    _gpu, tensors, last = segment_06()
    starts = [t.address for t in tensors] + [last.address]
    n = len(tensors)
    # plans[i]: {freed: (unmapped, chosen)} for tensors before i, tensor i - 1 kept (or i == 0)
    plans = [dict() for _ in range(n + 2)]
    plans[0] = {0: (0, ())}

    def offer(at, freed, unmapped, chosen):
        if plans[at].get(freed, (-1,))[0] < unmapped:
            plans[at][freed] = (unmapped, chosen)

    for i in range(n + 1):
        # keep only plans that no cheaper plan beats: the frontier stays small
        frontier, top = {}, -1
        for freed in sorted(plans[i]):
            if plans[i][freed][0] > top:
                frontier[freed], top = plans[i][freed], plans[i][freed][0]
        plans[i] = frontier
        for freed, (unmapped, chosen) in list(plans[i].items()):
            if i < n:
                offer(i + 1, freed, unmapped, chosen)          # keep tensor i
            cost = 0
            for j in range(i, n):                              # free the run i..j, keep j + 1
                cost += SIZES_06[j]
                if freed + cost > FREE_AT_MOST_06:
                    break
                first_page = -(-(starts[i] - starts[0]) // PAGE_06)
                end_page = (starts[j + 1] - starts[0]) // PAGE_06
                pages = max(0, end_page - first_page)
                offer(min(j + 2, n + 1), freed + cost, unmapped + pages * PAGE_06,
                      chosen + tuple(range(i, j + 1)))
    unmapped, chosen = max(v for p in plans for v in p.values())
    return unmapped, sorted(chosen)


_BEST = []


def most_unmapped_06() -> int:
    if not _BEST:
        _BEST.append(best_plan_06()[0])
    return _BEST[0]


def _numbers(answer) -> list:
    if not isinstance(answer, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in answer):
        raise AnswerShapeError(f"the answer is a list of tensor numbers, 0 to {len(SIZES_06) - 1}")
    wrong = [i for i in answer if not 0 <= i < len(SIZES_06)]
    if wrong:
        raise AnswerShapeError(f"the tensors are numbered 0 to {len(SIZES_06) - 1}; {wrong} are "
                               f"not among them")
    return sorted(set(answer))


@exercise("06.ex", "which tensors to free so that empty_cache() unmaps the most",
          "Under expandable_segments:True a program has made the 40 tensors of SIZES_06, in "
          "order, on a fresh 2 GiB card, then one more that it keeps "
          "(gpumemlab.lessons.expandable_segments.segment_06: one growing segment, the tensors "
          "back to back). It may free tensors adding up to at most "
          f"{format_size(FREE_AT_MOST_06)}, then call empty_cache(). Which tensors (their "
          "numbers in SIZES_06) should it free so that empty_cache() unmaps as much memory as "
          "it can?",
          "a list of tensor numbers (indices into SIZES_06)",
          hints=("empty_cache() unmaps the pages of an expandable segment that no live tensor "
                 "touches. How much of a freed tensor's size is that?",
                 "Read the tensors' addresses: a freed range gives back the whole 20 MiB pages "
                 "inside it. Freeing neighbours together joins their ranges, and the pages they "
                 "shared come back too.",
                 "Compare runs of neighbouring tensors by the pages they return per byte freed, "
                 "within the budget."),
          stub=[])
def _judge_06(answer):
    chosen = _numbers(answer)
    freed = sum(SIZES_06[i] for i in chosen)
    figures = {"freed": freed, "tensors": chosen}
    if freed > FREE_AT_MOST_06:
        return False, (f"those tensors add up to {format_size(freed)}, more than "
                       f"{format_size(FREE_AT_MOST_06)}"), figures
    got, best = unmapped_after_freeing(chosen), most_unmapped_06()
    figures["unmapped"] = got
    if not chosen:
        return False, (f"with no tensor freed, empty_cache() unmaps {format_size(got)}: name "
                       f"the tensors to free"), figures
    if got >= best:
        return True, (f"freeing {format_size(freed)} lets empty_cache() unmap "
                      f"{format_size(got)}, the most the budget buys"), figures
    why = (f"freeing {format_size(freed)} lets empty_cache() unmap {format_size(got)}, short of "
           f"the {format_size(best)} that {format_size(FREE_AT_MOST_06)} of frees can buy")
    alone = [i for i in chosen if i - 1 not in chosen and i + 1 not in chosen]
    if alone:
        why += (f"; tensor(s) {alone} were freed without a neighbour: only the whole pages "
                f"inside each one's own range came back")
    return False, why, figures


# -- the lesson's predict questions (see why_a_cache)
question("06.p1", "number", unit="segments", misconceptions=(
    Misconception(lambda a: 1, "The small pool and the large pool never share a segment: the "
                  "1-byte tensor keeps its own 2 MiB one."),
    Misconception(lambda a: 3, "Expandable segments map new pages into one growing segment per "
                  "pool: the two large tensors share it."),
))
question("06.p2", "choice", choices=("yes", "no: out of memory"), misconceptions=(
    Misconception("no: out of memory", "An expandable segment is one virtual range whose physical "
                  "pages are mapped as needed: the free pages between live tensors can be "
                  "unmapped (`release_cached_blocks`) and mapped again at the segment's end, so "
                  "the request needs free memory, not one contiguous free block."),
))
