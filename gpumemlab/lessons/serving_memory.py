"""Lesson 15, serving memory beyond pages: its exercise (which of a trainer's kept rollout
buffers to offload, within a copy budget, so that an engine with a larger KV cache still wakes up
beside it) and its selftest workload ``graph_pool_outputs`` (CUDA graphs captured largest first
into one shared pool, outputs released or kept). The judge runs the sleep/train/wake cycle of
``gpumemlab.kvcache.sleep_mode`` on a fresh ``SimulatedGPU`` with the learner's buffers offloaded
before ``empty_cache()`` (see ``lesson_exercises`` for the contract)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from gpumemlab.kvcache.sleep_mode import TrainerStep
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.units import format_size, GiB, MiB, parse_size

CARD_15 = "24GiB"
WEIGHTS_15 = "6GiB"
GRAPHS_15 = "512MiB"


# -- 13: offload the right rollout buffers so that the engine wakes with more KV cache
# The reasoning asked for: empty_cache() returns whole free segments only, so a kept buffer pins
# the segment best fit carved it from, and the segment comes back only when every buffer in it
# leaves. Offloading a buffer costs its bytes (a PCIe copy); it gains nothing until its segment is
# empty. The plan is a knapsack over the trainer's segments, read off its block map (which
# buffers share a segment); one buffer at a time, or sets of buffers (2**24), is no way there.
_rng = random.Random(13)
_acts = [_rng.randint(4, 20) * 64 * MiB for _ in range(15)]
ACTS_15 = tuple(_acts) + (12 * GiB - sum(_acts),)        # sixteen activations, 12 GiB in all
BUFFERS_15 = tuple(_rng.randint(8, 200) * MiB for _ in range(24))   # kept after the step
OFFLOAD_AT_MOST_15 = 1 * GiB    # the buffers copied to the host may add up to at most this
del _rng, _acts


@dataclass
class OffloadingStep(TrainerStep):
    """The exercise's trainer step: ``BUFFERS_15`` kept after the step, then the buffers numbered
    in ``offload`` copied to the host (freed on the GPU). ``placement`` records, for each buffer,
    the address of the segment it was carved from."""
    offload: tuple = ()
    placement: list = field(default_factory=list)

    def run(self, gpu) -> list:
        kept = super().run(gpu)
        segments = [(s["address"], s["address"] + s["total_size"]) for s in gpu.memory_snapshot()]
        self.placement[:] = [next(lo for lo, hi in segments if lo <= t.address < hi) for t in kept]
        for i in self.offload:
            kept[i].free()
        return [t for i, t in enumerate(kept) if i not in self.offload]


def cycle_15(offload=(), kv_cache=None) -> tuple:
    """The lesson's cycle (``empty_cache()`` before the wake-up, default settings) with the
    exercise's trainer, the buffers numbered in ``offload`` moved to the host before
    ``empty_cache()``, and a KV cache of ``kv_cache`` (``KV_15()`` by default): (the cycle's
    result, what the trainer still reserves after ``empty_cache()`` outside the graph pool, the
    step, whose ``placement`` says where each buffer was)."""
    from gpumemlab.kvcache.sleep_mode import sleep_wake_cycle
    step = OffloadingStep(activations=ACTS_15, keep=BUFFERS_15, offload=tuple(offload))
    r = sleep_wake_cycle(CARD_15, weights=WEIGHTS_15,
                         kv_cache=KV_15() if kv_cache is None else kv_cache,
                         graph_pool=GRAPHS_15, trainer=step, empty_cache_before_wake=True)
    _name, _mapped, reserved, _allocated, _free = next(p for p in r.phases
                                                       if p[0] == "empty_cache()")
    return r, reserved - r.graph_pool_bytes, step


def _groups(placement) -> dict:
    groups = {}
    for i, address in enumerate(placement):
        groups.setdefault(address, []).append(i)
    return groups


_KV = []


def KV_15() -> int:
    """The KV cache the engine must wake with: what the card leaves once the trainer keeps only
    the segments the best plan cannot empty (computed once, by the simulator)."""
    if not _KV:
        _r, pinned, step = cycle_15((), kv_cache=0)
        # a segment's size: what it adds to the trainer's reserved bytes, read from one run that
        # offloads that segment's buffers alone
        best = {0: 0}
        for address, members in _groups(step.placement).items():
            cost = sum(BUFFERS_15[i] for i in members)
            if cost > OFFLOAD_AT_MOST_15:
                continue
            gain = pinned - cycle_15(members, kv_cache=0)[1]
            for spent, got in list(best.items()):
                if spent + cost <= OFFLOAD_AT_MOST_15 and best.get(spent + cost, -1) < got + gain:
                    best[spent + cost] = got + gain
        room = (parse_size(CARD_15) - parse_size(GRAPHS_15) - parse_size(WEIGHTS_15)
                - (pinned - max(best.values())))
        _KV.append(room // MiB * MiB)
    return _KV[0]


def _buffer_numbers(answer) -> list:
    if not isinstance(answer, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in answer):
        raise AnswerShapeError(f"the answer is a list of buffer numbers, 0 to "
                               f"{len(BUFFERS_15) - 1}")
    wrong = [i for i in answer if not 0 <= i < len(BUFFERS_15)]
    if wrong:
        raise AnswerShapeError(f"the buffers are numbered 0 to {len(BUFFERS_15) - 1}; {wrong} "
                               f"are not among them")
    return sorted(set(answer))


@exercise("15.ex", "offload the buffers that let the engine wake with more KV cache",
          "A 24 GiB card is shared by a vLLM-like engine (6 GiB of weights, a 512 MiB CUDA-graph "
          "pool) and a trainer. The engine sleeps (level 1); the trainer runs one step "
          "(kv.TrainerStep with activations=ACTS_15, sixteen of them, and keep=BUFFERS_15: 24 "
          "rollout buffers it keeps after the step, from gpumemlab.lessons.serving_memory); "
          "then it may copy some of those buffers to the host, adding up to at most "
          f"{format_size(OFFLOAD_AT_MOST_15)}, before empty_cache() is called and the engine "
          "wakes up, default allocator settings. The engine's KV cache is now "
          "KV_15() (the same module). Which buffers (their numbers in BUFFERS_15) should the "
          "trainer offload so that the engine wakes up?",
          "a list of buffer numbers (indices into BUFFERS_15)",
          hints=("After empty_cache(), what does the trainer's caching allocator still hold? "
                 "What does offloading one buffer give back while another buffer shares its "
                 "segment?",
                 "Run the trainer's step on a card of your own and read its block map: which "
                 "buffers share a segment? A segment comes back only when all of its buffers "
                 "leave; it costs their bytes and returns its size.",
                 "Choose the segments that return the most per byte copied, within the budget, "
                 "then offload every buffer of each."),
          stub=[])
def _judge_15(answer):
    chosen = _buffer_numbers(answer)
    cost = sum(BUFFERS_15[i] for i in chosen)
    if cost > OFFLOAD_AT_MOST_15:
        return False, (f"those buffers add up to {format_size(cost)}, more than the "
                       f"{format_size(OFFLOAD_AT_MOST_15)} the copy budget allows"), \
            {"offloaded": chosen, "copied": cost}
    r, pinned, step = cycle_15(chosen)
    groups = _groups(step.placement)
    partial = sorted(min(m) for m in groups.values() if set(m) & set(chosen)
                     and not set(m) <= set(chosen))
    figures = {"offloaded": chosen, "copied": cost, "pinned_after_empty_cache": pinned,
               "woke": r.woke}
    if r.woke:
        return True, (f"offloading {format_size(cost)} empties whole segments: after "
                      f"empty_cache() the trainer still holds {format_size(pinned)} and the "
                      f"engine wakes with its {format_size(KV_15())} of KV cache"), figures
    why = (f"after empty_cache() the trainer still holds {format_size(pinned)}, the segments "
           f"its remaining buffers were carved from, so the engine cannot map its weights and "
           f"{format_size(KV_15())} of KV cache")
    if not chosen:
        return False, why + ": offload some buffers", figures
    if partial:
        why += (f". Some offloaded buffers shared a segment with buffers that stayed (the "
                f"segments of buffer(s) {partial}): copying them returned nothing")
    else:
        why += (". Every segment you emptied came back, but another choice within the budget "
                "empties segments that return more")
    return False, why, figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
SIZES_15 = (8, 4, 2, 1)


def graph_pool_outputs(gpu, *, sizes=SIZES_15, release: bool = True):
    """Lesson 15's graph pool as plain allocations: one graph per batch size, largest first,
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
question("15.p1", "choice", choices=("larger", "about the same", "smaller"), misconceptions=(
    Misconception("smaller", "In one shared pool each smaller capture reuses blocks the larger "
                  "ones freed and adds little; the linear rule charges every size as if it "
                  "added as much as the second largest."),
))
question("15.p2", "number", unit="tokens")
question("15.p3", "choice", choices=("as it is", "empty_cache() before wake_up()",
                                     "empty_cache() with expandable_segments:True", "none of them"),
         misconceptions=(
             Misconception("empty_cache() before wake_up()", "empty_cache() returns only wholly "
                           "free segments: a segment with one live tensor stays reserved. With "
                           "expandable segments it can also unmap the free pages of a partly "
                           "used segment."),
         ))
