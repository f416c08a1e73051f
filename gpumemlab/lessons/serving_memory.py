"""Lesson 13, serving memory beyond pages: its exercise (the sizes of a trainer's activations
under which an engine with a larger KV cache still wakes up beside it) and its selftest workload ``graph_pool_outputs`` (CUDA
graphs captured largest first into one shared pool, outputs released or kept). The judge runs the
sleep/train/wake cycle of ``gpumemlab.kvcache.sleep_mode`` on a fresh ``SimulatedGPU`` with the
learner's activation sizes (see ``lesson_exercises`` for the contract)."""
from __future__ import annotations

from gpumemlab.kvcache.sleep_mode import TrainerStep
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise, sizes_answer
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.units import format_size, GiB, MiB, parse_size

CARD_13 = "24GiB"
WEIGHTS_13 = "6GiB"
GRAPHS_13 = "512MiB"


# -- 13: lay out the trainer's activations so that the engine wakes with more KV cache
# The reasoning asked for: empty_cache() returns whole free segments only, and the tensor the
# trainer keeps after its step pins the segment it was carved from; which segment that is follows
# from best fit (c10 get_free_block: the smallest free block that fits, a split remainder
# included), after the optimizer states took theirs.
KV_13 = 16 * GiB                # the KV cache the engine must wake up with (the lesson's 15 fails)
ACTS_13 = TrainerStep().activations     # four activations; their sum is the batch's, kept


def cycle_13(activations) -> tuple:
    """The lesson's cycle (``empty_cache()`` before the wake-up, default settings) with a KV cache
    of ``KV_13`` and the trainer's activations of these sizes: (the cycle's result, what the
    trainer still reserves after ``empty_cache()`` outside the graph pool, free bytes then)."""
    from gpumemlab.kvcache.sleep_mode import sleep_wake_cycle
    r = sleep_wake_cycle(CARD_13, weights=WEIGHTS_13, kv_cache=KV_13, graph_pool=GRAPHS_13,
                         trainer=TrainerStep(activations=tuple(activations)),
                         empty_cache_before_wake=True)
    _name, _mapped, reserved, _allocated, free = next(p for p in r.phases
                                                      if p[0] == "empty_cache()")
    return r, reserved - r.graph_pool_bytes, free


@exercise("13.ex", "lay out the trainer so the engine wakes with more KV cache",
          "A 24 GiB card is shared by a vLLM-like engine (6 GiB of weights, a 512 MiB CUDA-graph "
          f"pool) and the lesson's trainer. The engine sleeps (level 1), the trainer runs one "
          "step and offloads, empty_cache() is called, and the engine wakes up, default "
          f"allocator settings. Its KV cache is now {format_size(KV_13)}. The trainer's forward "
          f"makes four activations adding up to {format_size(sum(ACTS_13))} (the lesson's are "
          f"four of {format_size(ACTS_13[0])}); keep their total, and choose their sizes so "
          "that the engine wakes up.",
          f"a list of four sizes adding up to {format_size(sum(ACTS_13))}, each in bytes or a "
          "string with a unit (MiB, GiB)",
          hints=("After empty_cache(), what does the trainer's caching allocator still hold, and "
                 "how much room does the engine need?",
                 "The 64 MiB tensor kept after the step pins the whole segment it was carved "
                 "from. Which segment can you make small?",
                 "Before the kept tensor, the two 2 GiB optimizer states are carved, best fit: "
                 "each takes the smallest free block that holds it, a remainder included. The "
                 "kept tensor then takes the smallest free block left."),
          stub=[f"{a // GiB} GiB" for a in ACTS_13])   # as the notebook ships it
def _judge_13(answer):
    sizes = sizes_answer(answer, len(ACTS_13))
    if sum(sizes) != sum(ACTS_13) or 0 in sizes:
        raise AnswerShapeError(f"four activations, none of them empty, adding up to "
                               f"{format_size(sum(ACTS_13))} (yours add up to "
                               f"{format_size(sum(sizes))})")
    r, pinned, free = cycle_13(sizes)
    figures = {"sizes": sizes, "pinned_after_empty_cache": pinned, "free_at_wake": free,
               "woke": r.woke}
    if r.woke:
        return True, (f"after empty_cache() the trainer still holds {format_size(pinned)}, the "
                      f"segment its kept tensor pins, and the engine wakes with "
                      f"{format_size(free)} free"), figures
    smallest = min(s for s in sizes)
    why = (f"after empty_cache() the trainer still holds {format_size(pinned)} (the segment its "
           f"kept 64 MiB tensor was carved from), so the driver has {format_size(free)} free and "
           f"the engine cannot map its weights and {format_size(KV_13)} of KV cache")
    if sorted(sizes) == sorted(ACTS_13):
        return False, why + ": that is the lesson's own layout", figures
    if pinned == smallest:
        room = free + pinned - parse_size(WEIGHTS_13) - KV_13
        why += (f". The kept tensor did land in your smallest activation's segment, but the "
                f"engine can spare at most {format_size(max(room, 0))} for it")
    elif pinned > smallest:
        why += (f". It was not your smallest activation's segment ({format_size(smallest)}): "
                f"the two 2 GiB optimizer states were carved first, best fit, and the kept tensor "
                f"then took the smallest free block left, which lay in a "
                f"{format_size(pinned)} segment")
    return False, why, figures


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
