"""Lesson 03, reading the evidence: its exercise (the largest request the cache serves now, on the
kit's seeded training-like state).
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
    """Does a request of ``nbytes`` on the evidence state need no new cudaMalloc?"""
    from gpumemlab.devices.errors import OutOfMemoryError

    gpu, rec = evidence_state()
    before = gpu.memory_stats()["num_device_alloc"]
    try:
        x = gpu.empty(nbytes)
    except OutOfMemoryError:
        return False
    del x, rec
    return gpu.memory_stats()["num_device_alloc"] == before


@exercise("03.ex", "the largest tensor the cache serves now",
          "Investigate the state left by gml.scenarios.train_step_like on a fresh 8 GiB "
          "SimulatedGPU (release=False keeps its tensors). What is the largest request that "
          "succeeds right now WITHOUT a new cudaMalloc? Use the evidence: the block map, "
          "memory_stats(), gml.fragmentation.",
          "a size, like '37 MiB' or a number of bytes (to within 512 bytes)",
          hints=("Only a cached free block can serve a request without a cudaMalloc.",
                 "The request must fit in ONE free block of the right pool.",
                 "gml.fragmentation(snapshot) names it: largest_request_now_bytes."),
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
        return False, f"a {exact(size)} request needs a new cudaMalloc (or fails)", figures
    if bigger:
        return False, (f"{exact(size)} fits from the cache, but so does "
                       f"{exact(round_size(size) + 512)}: there is a larger one"), figures
    return True, (f"{exact(size)} is served by a cached block, and "
                  f"{exact(round_size(size) + 512)} would need a cudaMalloc"), figures


# -- the lesson's predict questions (see caching_allocator)
question("03.p1", "number", unit="cudaMalloc calls")
question("03.p2", "choice", choices=("load_model", "forward", "backward", "optimizer_step"))
