"""Lesson 13, serving memory beyond pages: its exercise (the largest KV cache an engine can give
itself and still wake up beside a trainer) and its selftest workload ``graph_pool_outputs`` (CUDA
graphs captured largest first into one shared pool, outputs released or kept). The judge runs the
sleep/train/wake cycle of ``gpumemlab.kvcache.sleep_mode`` on a fresh ``SimulatedGPU`` with the
learner's KV size and one GiB more (see ``lesson_exercises`` for the contract)."""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.units import GiB, MiB

CARD_13 = "24GiB"
WEIGHTS_13 = "6GiB"
GRAPHS_13 = "512MiB"


def wakes_13(kv_gib: int) -> tuple:
    """(woke up, the cycle's result) for a KV cache of ``kv_gib`` GiB, with ``empty_cache()``
    before the wake-up and default allocator settings."""
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.kvcache.sleep_mode import WakeUpError, sleep_wake_cycle
    try:
        r = sleep_wake_cycle(CARD_13, weights=WEIGHTS_13, kv_cache=kv_gib * GiB, graph_pool=GRAPHS_13,
                             empty_cache_before_wake=True)
    except (WakeUpError, OutOfMemoryError) as exc:   # the engine does not even start: its
        return False, f"the engine cannot start: {exc}"[:300]   # mappings or its graphs' pool
    return r.woke, r


@exercise("13.ex", "the largest KV cache that still wakes up",
          "A 24 GiB card is shared by a vLLM-like engine (6 GiB of weights, a 512 MiB CUDA-graph pool, "
          "a KV cache of your size) and a trainer (the lesson's TrainerStep). The engine sleeps "
          "(level 1), the trainer runs one step and offloads, empty_cache() is called, and the "
          "engine wakes up. Give the LARGEST KV cache, in whole GiB, for which the wake-up succeeds "
          "with the default allocator settings.",
          "an int: GiB of KV cache",
          hints=("The wake-up maps weights + KV cache from the driver; it needs that much free.",
                 "After empty_cache(), what does the trainer's caching allocator still hold? "
                 "The table of the lesson shows it.",
                 "A tensor kept after the step pins the whole segment it was carved from."),
          stub=15)
def _judge_13(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or not 1 <= answer <= 23:
        raise AnswerShapeError("the answer is a whole number of GiB from 1 to 23")
    woke, r = wakes_13(answer)
    figures = {"kv_gib": answer, "woke": woke}
    if not woke:
        why = r.failure if hasattr(r, "failure") else r
        return False, f"with {answer} GiB of KV cache the engine cannot wake up: {why}", figures
    more, _ = wakes_13(answer + 1)
    figures["one_more_woke"] = more
    if more:
        return False, (f"{answer} GiB wakes up, and so does {answer + 1} GiB: a larger KV cache "
                       f"fits"), figures
    return True, (f"{answer} GiB wakes up; {answer + 1} GiB would not: the segment the kept tensor "
                  f"pins is what is missing"), figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
SIZES_13 = (8, 4, 2, 1)


def graph_pool_outputs(gpu, *, sizes=SIZES_13, release: bool = True):
    """Lesson 13's graph pool as plain allocations: one graph per batch size, largest first,
    into one shared pool; each capture makes three 2 MiB-a-sequence activations that die and an
    8 MiB-a-sequence output. First the output is released at once (vLLM keeps a weak reference),
    then, in a fresh pool, every output stays alive. ``notes["pool_reserved"]``: what each pool
    reserved (bytes), weak references first."""
    from gpumemlab.devices.scenarios import ScenarioRun

    run = ScenarioRun(gpu, "graph_pool_outputs")
    reserved = [run.capture_shared_pool(f"pool {k}", sizes, 2 * MiB, 8 * MiB, keep_outputs=keep)
                for k, keep in enumerate((False, True))]
    run.rec.notes.update(sizes=list(sizes), pool_reserved=reserved)
    return run.finish(release)


# -- the lesson's predict questions (their words are in the lesson; these keep the unit after a
# kernel restart)
question("13.p1", "choice", choices=("larger", "about the same", "smaller"), misconceptions=(
    Misconception("smaller", "In one shared pool each smaller capture reuses blocks the larger "
                  "ones freed and adds little; the linear rule charges every size as if it "
                  "added as much as the second largest."),
))
question("13.p2", "number", unit="tokens")
question("13.p3", "choice", choices=("as it is", "empty_cache() before wake_up()",
                                     "empty_cache() with expandable_segments:True", "none of them"),
         misconceptions=(
             Misconception("empty_cache() before wake_up()", "empty_cache() returns only wholly "
                           "free segments: a segment with one live tensor stays reserved. With "
                           "expandable segments it can also unmap the free pages of a partly "
                           "used segment."),
         ))
