"""Lesson 06, expandable segments: its exercise (which tensors to free so that one large request
fits once the freed pages are unmapped: a freed tensor gives back only the 20 MiB pages no live
tensor still touches, as ``ExpandableSegment::unmap`` in c10's CUDACachingAllocator.cpp unmaps
whole pages only).
"""
from __future__ import annotations

import functools

from gpumemlab.quizkit.exercise_base import exercise, numbered_answer
from gpumemlab.units import format_size, GiB, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question

# -- 06: the tensors to free so that one request fits under expandable segments
PAGE_06 = 20 * MiB
CARD_06 = 2 * GiB
CONF_06 = "expandable_segments:True"
# 24 tensors made in this order, in MiB (2016 MiB in all): none a whole number of pages
SIZES_06 = (126, 98, 130, 35, 87, 122, 58, 29, 25, 43, 109, 100, 85, 122, 119, 72, 65, 123, 27,
            59, 87, 127, 50, 118)
FREE_AT_MOST_06 = 700 * MiB


def layout_06(freed=(), request=None):
    """The exercise's card: the tensors of ``SIZES_06`` made in order on a ``CARD_06`` card under
    ``CONF_06``, then those numbered in ``freed`` freed, then ``request`` bytes (if given).
    Returns (gpu, the tensors, whether the request fitted or None)."""
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(CARD_06, alloc_conf=CONF_06, record_history=False, record_frames=False)
    tensors = [gpu.empty(mib * MiB) for mib in SIZES_06]
    for i in freed:
        tensors[i].free()
    ok = None
    if request is not None:
        try:
            tensors.append(gpu.empty(request))
            ok = True
        except OutOfMemoryError:
            ok = False
    return gpu, tensors, ok


def _pages_back(freed) -> int:
    """Pages that a set of freed tensors leaves touched by no live tensor (the tensors sit one
    after another in one segment, from its start; past the last one nothing lives)."""
    ends, at = [], 0
    for mib in SIZES_06:
        at += mib * MiB
        ends.append(at)
    n, chosen, back, i = len(SIZES_06), set(freed), 0, 0
    while i < n:
        if i not in chosen:
            i += 1
            continue
        b = i
        while b + 1 in chosen:
            b += 1
        start = ends[i - 1] if i else 0
        top = -(-ends[b] // PAGE_06) if b == n - 1 else ends[b] // PAGE_06
        back += max(0, top - -(-start // PAGE_06))
        i = b + 1
    return back


@functools.lru_cache(maxsize=1)
def REQUEST_06() -> int:
    """The request to make fit: the largest whole number of pages that fits after the best set of
    frees within ``FREE_AT_MOST_06`` (the plan found over the runs of neighbours, the request
    found by the simulator)."""
    n, budget = len(SIZES_06), FREE_AT_MOST_06 // MiB

    @functools.lru_cache(maxsize=None)
    def best(i, left):                 # the most pages from tensor i on; tensor i-1 stays
        if i >= n:
            return 0, ()
        top, cost = best(i + 1, left), 0
        for b in range(i, n):
            cost += SIZES_06[b]
            if cost > left:
                break
            got, plan = best(b + 2, left - cost)
            run = tuple(range(i, b + 1))
            if _pages_back(run) + got > top[0]:
                top = _pages_back(run) + got, run + plan
        return top

    plan = best(0, budget)[1]
    pages = 1
    while layout_06(plan, request=(pages + 1) * PAGE_06)[2]:
        pages += 1
    return pages * PAGE_06


def _tensor_numbers(answer) -> list:
    return numbered_answer(answer, len(SIZES_06), "tensor")


@exercise("06.ex", "free the tensors whose pages come back",
          f"A {format_size(CARD_06)} card under {CONF_06} holds {len(SIZES_06)} tensors, made "
          "one after another in this order, of SIZES_06 MiB each "
          "(gpumemlab.lessons.expandable_segments: tensor 0 is the first). You may free tensors "
          f"adding up to at most {format_size(FREE_AT_MOST_06)}. Which ones (their numbers) "
          "should you free so that one tensor of REQUEST_06() bytes (the same module) can then "
          "be allocated? layout_06(freed, request) runs it on the simulated card.",
          "a list of tensor numbers (indices into SIZES_06)",
          hints=("A request needs physical pages, not one contiguous free block: how many 20 MiB "
                 "pages does the card hold, and how many are still mapped after your frees?",
                 "A freed tensor's memory goes back only in whole pages that no live tensor "
                 "touches: draw the page boundaries under the tensors. What does a page shared "
                 "by two freed neighbours do, and one shared with a tensor that stays?",
                 "Freeing neighbours together gives back the pages between them: compare runs "
                 "of neighbours, within the budget, by the pages they give back."),
          stub=[])
def _judge_06(answer):
    chosen = _tensor_numbers(answer)
    cost = sum(SIZES_06[i] for i in chosen) * MiB
    request = REQUEST_06()
    figures = {"freed": chosen, "freed_bytes": cost, "request_bytes": request}
    if cost > FREE_AT_MOST_06:
        return False, (f"those tensors add up to {format_size(cost)}, more than the "
                       f"{format_size(FREE_AT_MOST_06)} you may free"), figures
    gpu, _tensors, fits = layout_06(chosen, request=request)
    figures["fits"] = bool(fits)
    if fits:
        return True, (f"freeing {format_size(cost)} gives back {_pages_back(chosen)} whole pages "
                      f"that no live tensor touches, and the {format_size(request)} tensor "
                      f"fits"), figures
    if not chosen:
        return False, f"with nothing freed the {format_size(request)} tensor does not fit", figures
    lost = sum(SIZES_06[i] for i in chosen) * MiB // PAGE_06 - _pages_back(chosen)
    why = f"the {format_size(request)} tensor does not fit"
    if lost > 0:
        why += (f": the {format_size(cost)} you freed spans {lost} more page(s) than come back, "
                "pages it shares with tensors that stay mapped. Which frees give back the most "
                "whole pages for the budget?")
    else:
        why += ": another choice within the budget gives back more pages"
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
