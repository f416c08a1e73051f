"""Lesson 04, empty_cache: its exercise (when to call ``empty_cache`` to share the card with few
cudaMalloc calls) and its selftest workload ``empty_cache_story`` (``release_cached_blocks``
returns whole free segments only: a live byte pins its segment, a fragmented segment keeps its
holes, so the OOM stays).
"""
from __future__ import annotations

from gpumemlab.devices.scenarios import device_chunk, ScenarioRun
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import GiB, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 04: when to call empty_cache: share the card, keep the cudaMalloc calls few
PHASES_04 = 6            # phase 0: an evaluation pass of 6 GiB; phases 1-5: training, 1.5 GiB
OTHER_AFTER_04 = 2       # another process asks the driver for 5 GiB after phase 2


def run_04(calls) -> dict:
    """Lesson 04's exercise workload with ``empty_cache()`` after the phases in ``calls``."""
    from gpumemlab.devices.simulated import SimulatedGPU
    from gpumemlab.units import GiB

    gpu = SimulatedGPU("8GiB", alloc_conf="")
    other = None
    for phase in range(PHASES_04):
        x = gpu.empty(6 * GiB if phase == 0 else 3 * GiB // 2)
        del x
        if phase in calls:
            gpu.empty_cache()
        if phase == OTHER_AFTER_04:
            other = gpu.allocator.driver.cuda_malloc(5 * GiB)
    return {"other_got_memory": other is not None,
            "cudaMalloc": gpu.memory_stats()["num_device_alloc"],
            "device_syncs": gpu.memory_stats()["num_sync_all_streams"]}


def _fewest_04() -> int:
    from itertools import combinations

    best = None
    for k in range(PHASES_04 + 1):
        for calls in combinations(range(PHASES_04), k):
            r = run_04(set(calls))
            if r["other_got_memory"] and (best is None or r["cudaMalloc"] < best):
                best = r["cudaMalloc"]
    return best


@exercise("04.ex", "when to call empty_cache",
          "Six phases run on an 8 GiB card: phase 0 is an evaluation pass with a 6 GiB tensor, "
          "phases 1 to 5 train with a 1.5 GiB tensor; every tensor dies at the end of its phase. "
          "After phase 2 another process asks the driver for 5 GiB. Choose after which phases "
          "to call empty_cache() so that the other process gets its 5 GiB, with as few "
          "cudaMalloc calls as any choice allows.",
          "a list of phase numbers, each from 0 to 5 (the empty list for never)",
          hints=("Never calling it leaves the evaluation pass's 6 GiB cached: the other process "
                 "finds 2 GiB on the driver.",
                 "Every call returns the cache, and the next phase pays a cudaMalloc again.",
                 "One well-placed call, at or before phase 2, is enough."),
          stub=[])
def _judge_04(answer):
    if not isinstance(answer, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < PHASES_04 for i in answer):
        raise AnswerShapeError("the answer must be a list of phase numbers from 0 to 5")
    got = run_04(set(answer))
    fewest = _fewest_04()
    figures = dict(got, fewest_cudaMalloc=fewest, calls=sorted(set(answer)))
    if not got["other_got_memory"]:
        return False, (f"with empty_cache after {sorted(set(answer)) or 'no phase'} the other "
                       f"process's 5 GiB cudaMalloc fails"), figures
    if got["cudaMalloc"] > fewest:
        return False, (f"the other process gets its memory, but training pays "
                       f"{got['cudaMalloc']} cudaMalloc calls; {fewest} is possible"), figures
    return True, (f"the other process gets 5 GiB and the run needs only {got['cudaMalloc']} "
                  f"cudaMalloc calls ({got['device_syncs']} device-wide sync(s))"), figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
def empty_cache_story(gpu, *, release: bool = True):
    """Three freed tensors in three segments, then ``empty_cache()``; one live byte and
    ``empty_cache()``; a fragmented segment, ``empty_cache()`` and a request bigger than any
    hole. ``notes["reserved_after_empty_cache"]`` has reserved bytes after each call."""
    run = ScenarioRun(gpu, "empty_cache_story")
    chunk = device_chunk(gpu, 16)
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


# -- the lesson's predict questions (see why_a_cache)
question("04.p1", "size", misconceptions=(
    Misconception(lambda a: 0, "empty_cache() releases only segments with no live block: one "
                  "live byte pins its whole 2 MiB segment."),
    Misconception(lambda a: 512, "The byte's block is 512 B, but the driver gives and takes "
                  "whole segments: its 2 MiB segment stays."),
))
question("04.p2", "size", misconceptions=(
    Misconception(lambda a: 4 * GiB, "empty_cache() returns whole segments only: the four free "
                  "GiB are pieces of one 7 GiB segment that still holds live tensors."),
))
question("04.p3", "choice", choices=("yes", "no: out of memory"), misconceptions=(
    Misconception("yes", "Inside `except ... as err:` the traceback still holds the failed step's "
                  "frames and their 6 GiB of activations: with batch 4's 5 GiB that is more than "
                  "the 8 GiB card, and empty_cache() cannot free live tensors. Retry after the "
                  "except block ends."),
))
