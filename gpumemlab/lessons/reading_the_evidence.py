"""Lesson 03, reading the evidence: its exercise (which live tensors of the kit's seeded
training-like state to free, within a budget, so that ``empty_cache()`` hands back more: c10
``release_cached_blocks`` returns only segments with no live block).
"""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.predict_rules import question


# -- 03: read the evidence: which live tensors to free so that empty_cache() gives back more
# The reasoning asked for is the one behind "non-releasable" memory: empty_cache() returns whole
# segments only (c10 release_cached_blocks frees a segment whose blocks are all free), so the
# frees that pay are those that empty a segment, i.e. the segments whose live bytes are few.
FREE_AT_MOST_03 = 6 * MiB        # the live tensors freed may add up to at most this
RETURN_AT_LEAST_03 = 40 * MiB    # ... and empty_cache() must then return this much MORE


def evidence_state():
    """Lesson 03's exercise state: the kit's seeded training-like scenario on an 8 GiB card,
    tensors kept (``gml.scenarios.train_step_like(..., release=False)``)."""
    from gpumemlab.devices.scenarios import train_step_like
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU("8GiB", alloc_conf="")
    return gpu, train_step_like(gpu, release=False)


def returned_after_freeing(segments) -> tuple:
    """Free the live tensors of the evidence state's ``segments`` (their numbers in
    ``gml.text_blockmap``: address order), then ``empty_cache()``: (live bytes freed, bytes
    ``empty_cache()`` handed back)."""
    gpu, rec = evidence_state()
    spans = [(s["address"], s["address"] + s["total_size"]) for s in gpu.memory_snapshot()]
    chosen = [spans[i] for i in segments]
    keep, freed = [], 0
    for t in rec.held:
        if any(lo <= t.address < hi for lo, hi in chosen):
            freed += t.size
        else:
            keep.append(t)
    rec.held[:] = keep
    before = gpu.memory_reserved()
    gpu.empty_cache()
    return freed, before - gpu.memory_reserved()


def _segment_numbers(answer) -> list:
    if not isinstance(answer, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in answer):
        raise AnswerShapeError("the answer is a list of segment numbers, like [0, 5]")
    return sorted(set(answer))


@exercise("03.ex", "which tensors to free so that empty_cache() returns more",
          "Investigate the state left by gml.scenarios.train_step_like on a fresh 8 GiB "
          "SimulatedGPU (release=False keeps its tensors). The program may free live tensors "
          f"adding up to at most {format_size(FREE_AT_MOST_03)} before it calls empty_cache(). "
          "Which segments (their numbers in gml.text_blockmap) should it free every live tensor "
          f"of, so that empty_cache() then hands back at least {format_size(RETURN_AT_LEAST_03)} "
          "more than it would with no tensor freed? Read it from the block map of the state as "
          "it is.",
          "a list of segment numbers, as gml.text_blockmap prints them",
          hints=("empty_cache() hands back only segments whose blocks are all free. What does "
                 "freeing a tensor in a segment that still holds another live one give back?",
                 "The free blocks of a segment that holds a live block are 'non-releasable'. "
                 "Which segments become releasable, and at what cost in freed bytes?",
                 "Look for segments that are mostly free but hold one small live block: freeing "
                 "that block makes the whole segment releasable."),
          stub=[])
def _judge_03(answer):
    segments = _segment_numbers(answer)
    gpu, _rec = evidence_state()
    snap = gpu.memory_snapshot()
    if any(not 0 <= i < len(snap) for i in segments):
        return False, (f"the card has segments 0 to {len(snap) - 1}; "
                       f"{[i for i in segments if not 0 <= i < len(snap)]} are not among them"), {}
    idle = [i for i in segments if not any(b["state"] == "active_allocated"
                                           for b in snap[i]["blocks"])]
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
    if extra < RETURN_AT_LEAST_03:
        return False, (f"freeing {format_size(freed)} makes empty_cache() hand back "
                       f"{format_size(extra)} more, short of {format_size(RETURN_AT_LEAST_03)}"
                       ), figures
    return True, (f"freeing {format_size(freed)} of live tensors empties those segments, and "
                  f"empty_cache() hands back {format_size(extra)} more"), figures


# -- the lesson's predict questions (see why_a_cache)
question("03.p1", "number", unit="cudaMalloc calls")
question("03.p2", "choice", choices=("load_model", "forward", "backward", "optimizer_step"))
