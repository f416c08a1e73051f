"""Lesson 02, fragmentation: its exercise (free four of seven 1 GiB tensors so that a 3 GiB
tensor fits from the cache).
"""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import GiB, format_size
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 02: free four of seven 1 GiB tensors so that a 3 GiB tensor fits in the cache
def seven_blocks(gpu):
    """Lesson 02's state: a 7 GiB tensor dies, seven 1 GiB tensors are cut from its segment."""
    from gpumemlab.units import GiB

    warmup = gpu.empty(7 * GiB)
    del warmup
    return [gpu.empty(GiB) for _ in range(7)]


@exercise("02.ex", "free four, fit three",
          "On lesson 02's 8 GiB card seven 1 GiB tensors (0 to 6) sit side by side in one 7 GiB "
          "segment. Free exactly four of them, chosen so that a 3 GiB tensor then fits in the "
          "cache, with no new cudaMalloc.",
          "a list of four tensor numbers, each from 0 to 6",
          hints=("Freed blocks merge only with free neighbours in the same segment.",
                 "A 3 GiB tensor needs three free 1 GiB blocks side by side.",
                 "Free three neighbours, e.g. 2, 3 and 4, and any fourth."),
          stub=[0, 2, 4, 6])
def _judge_02(answer):
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU
    from gpumemlab.units import GiB

    if not isinstance(answer, list) or len(answer) != 4 or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 6 for i in answer) \
            or len(set(answer)) != 4:
        raise AnswerShapeError("the answer must be four different tensor numbers from 0 to 6")
    gpu = SimulatedGPU("8GiB", alloc_conf="")
    blocks = seven_blocks(gpu)
    for i in answer:
        blocks[i] = None
    before = gpu.memory_stats()["num_device_alloc"]
    largest = max(b["size"] for s in gpu.memory_snapshot() for b in s["blocks"]
                  if b["state"] == "inactive")
    try:
        x = gpu.empty(3 * GiB)
    except OutOfMemoryError:
        x = None
    figures = {"freed": sorted(answer), "largest_free_bytes": largest,
               "new_cudaMalloc": gpu.memory_stats()["num_device_alloc"] - before,
               "fits": x is not None}
    if x is None:
        return False, (f"after freeing {sorted(answer)} the largest free block is "
                       f"{format_size(largest)}: the 3 GiB tensor runs out of memory"), figures
    return True, (f"freeing {sorted(answer)} leaves a {format_size(largest)} free block: the "
                  f"3 GiB tensor fits from the cache"), figures


# -- the lesson's predict questions (see why_a_cache)
question("02.p1", "size", misconceptions=(
    Misconception(lambda a: a - GiB, "1 GiB short: the driver still has the 1 GiB of the card "
                  "that the 7 GiB segment did not take."),
))
question("02.p2", "choice",
         choices=("yes, from the cache", "yes, with a new cudaMalloc", "no: out of memory"),
         misconceptions=(
             Misconception("yes, from the cache", "A request is served by ONE free block: the "
                           "4 GiB free in the cache are 1 GiB pieces, each between live tensors."),
             Misconception("yes, with a new cudaMalloc", "c10 asks the driver for a new 2 GiB "
                           "segment, but the driver has only 1 GiB left: that cudaMalloc fails."),
         ))
