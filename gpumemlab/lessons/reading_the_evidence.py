"""Lesson 03, reading the evidence: its exercise (the largest request the cache still serves once
``empty_cache()`` has handed back every segment without a live tensor, read from the kit's seeded
training-like state).
"""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import exact, exercise, sizes_answer
from gpumemlab.quizkit.predict_rules import question


# -- 03: read the evidence: the largest request the cache serves now
def evidence_state():
    """Lesson 03's exercise state: the kit's seeded training-like scenario on an 8 GiB card,
    tensors kept (``gml.scenarios.train_step_like(..., release=False)``)."""
    from gpumemlab.devices.scenarios import train_step_like
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU("8GiB", alloc_conf="")
    return gpu, train_step_like(gpu, release=False)


def _from_cache(nbytes: int) -> bool:
    """After the evidence state's ``empty_cache()``, does a request of ``nbytes`` need no new
    cudaMalloc?"""
    from gpumemlab.devices.errors import OutOfMemoryError

    gpu, rec = evidence_state()
    gpu.empty_cache()
    before = gpu.memory_stats()["num_device_alloc"]
    try:
        x = gpu.empty(nbytes)
    except OutOfMemoryError:
        return False
    del x, rec
    return gpu.memory_stats()["num_device_alloc"] == before


@exercise("03.ex", "what the cache can still serve after empty_cache()",
          "Investigate the state left by gml.scenarios.train_step_like on a fresh 8 GiB "
          "SimulatedGPU (release=False keeps its tensors). Now suppose the program calls "
          "empty_cache(), which hands back to the driver every cached segment that holds no "
          "live tensor. What is then the largest request that succeeds WITHOUT a new "
          "cudaMalloc? Read it from the evidence of the state before the call: the block map "
          "and its segments.",
          "a size, like '37 MiB' or a number of bytes (to within 512 bytes)",
          hints=("Only a cached free block can serve a request without a cudaMalloc, and one "
                 "request needs ONE free block.",
                 "empty_cache() releases whole segments only: a segment that holds even one "
                 "live block keeps all of its free blocks.",
                 "In the block map (gml.show or gml.text_blockmap), look only at the segments "
                 "that hold a live block: their largest free block is the answer."),
          stub="1 GiB")
def _judge_03(answer):
    from gpumemlab.allocator.rounding import round_size

    (size,) = sizes_answer([answer], 1)
    if size == 0:
        return False, "a request of 0 bytes needs no memory at all: give the largest", {}
    fits = _from_cache(size)
    bigger = _from_cache(round_size(size) + 512) if fits else None
    figures = {"size": size, "fits_from_cache": fits, "next_size_fits": bigger}
    if not fits:
        return False, (f"after empty_cache(), a {exact(size)} request needs a new cudaMalloc "
                       f"(or fails)"), figures
    if bigger:
        return False, (f"after empty_cache(), {exact(size)} fits from the cache, but so does "
                       f"{exact(round_size(size) + 512)}: there is a larger one"), figures
    return True, (f"after empty_cache(), {exact(size)} is served by a cached block, and "
                  f"{exact(round_size(size) + 512)} would need a cudaMalloc"), figures


# -- the lesson's predict questions (see why_a_cache)
question("03.p1", "number", unit="cudaMalloc calls")
question("03.p2", "choice", choices=("load_model", "forward", "backward", "optimizer_step"))
