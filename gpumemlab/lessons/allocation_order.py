"""Lesson 12, allocation order and pools: its exercise, predict questions and selftest workload.

The exercise asks for an order in which five tensors kept alive together reserve the least
memory; the judge allocates the learner's order and every other one on fresh ``SimulatedGPU``
cards (c10's ``CUDACachingAllocator`` segment rules: a request of at most 1 MiB in a 2 MiB
small-pool segment, one up to 10 MiB in a 20 MiB segment that later requests share, a larger one
in a segment of its own size unless a free block of an open segment holds it). See
``lesson_exercises`` for the contract.
"""
from __future__ import annotations

from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question

CARD_12 = "8GiB"
SIZES_12 = (16 * MiB, 6 * MiB, 6 * MiB, 6 * MiB, 3 * MiB)   # the exercise's tensors, kept alive


def reserved_for_order(order, total_memory=CARD_12) -> int:
    """What a fresh card reserves once tensors of these sizes (bytes) are allocated in this order
    and all kept alive."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(total_memory, alloc_conf="", record_frames=False)
    held = [gpu.empty(n) for n in order]
    reserved = gpu.memory_reserved()
    del held
    return reserved


def _order_answer(answer) -> tuple:
    sizes_mib = sorted(n // MiB for n in SIZES_12)
    if not isinstance(answer, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in answer) \
            or sorted(answer) != sizes_mib:
        raise AnswerShapeError(f"the answer is one order of the five sizes in MiB, a list such as "
                               f"{sorted(sizes_mib, reverse=True)}")
    return tuple(n * MiB for n in answer)


@exercise("12.ex", "the order that reserves the least",
          "Five tensors stay alive together: one of 16 MiB and three of 6 MiB and one of 3 MiB "
          "(SIZES_12). Give an order of their allocations, on a fresh card with the default "
          "settings, in which they reserve the least memory any order can. Largest first and "
          "smallest first both reserve more: reason from the segment rules (which request opens "
          "a segment, and of what size; which later request fits in what an open one has "
          "left?).",
          "a list of the five sizes in MiB, in the order they are allocated",
          hints=("Write down the segment each request opens when nothing fits: 6 and 3 MiB open "
                 "a 20 MiB segment that later requests share; 16 MiB (10 MiB or more) opens one "
                 "of exactly 16 MiB.",
                 "A request of 10 MiB or more takes a free block of an open 20 MiB segment when one "
                 "is big enough. Which of the small tensors leaves a 20 MiB segment with room for "
                 "the 16 MiB one?",
                 "The live bytes add up to 37 MiB: the least any order reserves is two 20 MiB "
                 "segments. Which tensors can share each of them?"),
          stub=[])
def _judge_12(answer):
    from itertools import permutations

    order = _order_answer(answer)
    got = reserved_for_order(order)
    least = min(reserved_for_order(o) for o in set(permutations(SIZES_12)))
    figures = {"reserved": got, "least": least}
    if got == least:
        return True, (f"{format_size(got)}: two 20 MiB segments, each filled by tensors that fit "
                      f"in what the first one opened; the 16 MiB tensor is cut from what is left "
                      f"beside the small one instead of opening a segment of its own"), figures
    return False, (f"this order reserves {format_size(got)}; some order reserves less. Which "
                   f"request opens a segment another order would not need?"), figures


# -- the lesson's predict questions (see why_a_cache)
question("12.p1", "size", misconceptions=(
    Misconception(lambda a: 20 * MiB, "20 MiB is the live bytes (and what the small-first "
                  "orders reserve): big first, the 12 MiB request (10 MiB or more) gets a "
                  "segment of its own, and the two 4 MiB tensors then open a 20 MiB one."),
))
question("12.p2", "size", misconceptions=(
    Misconception(lambda a: 8 * MiB, "The 8 MiB the eight tensors left in the small pool "
                  "cannot serve a request over 1 MiB: 1 MiB + 1 B opens a 20 MiB large segment "
                  "beside them."),
))
question("12.p3", "size")
question("12.p4", "size", misconceptions=(
    Misconception(lambda a: 128 * MiB, "128 MiB is what the four tensors need, and what the "
                  "eight freed blocks add up to; but each 16 MiB block is a segment of its own, "
                  "segments never merge, so no freed block can serve 32 MiB."),
))


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
BIG_FIRST_12 = (12 * MiB, 4 * MiB, 4 * MiB)


def allocation_order(gpu, *, orders=(BIG_FIRST_12, tuple(reversed(BIG_FIRST_12))),
                     release: bool = True):
    """Lesson 12's first experiment: the same three tensors (12, 4 and 4 MiB) kept alive
    together, allocated big first and then big last, each order freed and the cache emptied
    before the next. ``notes["reserved"]``: what each order reserved (bytes), in order."""
    from gpumemlab.devices.scenarios import ScenarioRun

    run = ScenarioRun(gpu, "allocation_order")
    reserved = []
    for k, order in enumerate(orders):
        before = gpu.memory_reserved()
        for i, n in enumerate(order):
            run.alloc((k, i), n, f"order {k}: {format_size(n)}")
        reserved.append(gpu.memory_reserved() - before)
        for i, n in enumerate(order):
            run.free((k, i), f"order {k}: {format_size(n)} freed")
        run.act(f"order {k}: empty_cache()", gpu.empty_cache)
    run.rec.notes.update(orders=[list(o) for o in orders], reserved=reserved)
    return run.finish(release)
