"""Lesson 01, the caching allocator: its exercise (three tensors that fill one 20 MiB segment) and its
selftest workload ``cache_reuse`` (a loop that frees and re-allocates the same tensors asks the
driver for segments only in its first step: c10 ``get_free_block`` reuses cached blocks).
"""
from __future__ import annotations

from gpumemlab.devices.scenarios import device_chunk, ScenarioRun
from gpumemlab.quizkit.exercise_base import exercise, sizes_answer
from gpumemlab.units import format_size, MiB
from gpumemlab.allocator.constants import K_LARGE_BUFFER, K_SMALL_BUFFER
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.viz.words import count


# -- 01: three tensors that fill one 20 MiB segment, though their sizes add up to less
# The reasoning asked for is rule 2 (c10 should_split): a large-pool remainder of 1 MiB or less is
# not split off, so the tensor that leaves it gets the whole block and memory_allocated() counts it.
FULL_BELOW_01 = 19 * MiB + MiB // 2     # the sizes must add up to at most this


@exercise("01.ex", "three tensors that fill one 20 MiB segment",
          "Choose the sizes of three tensors, each of them in the LARGE pool, so that on a fresh "
          "card all three live in one 20 MiB segment (one cudaMalloc) and memory_allocated() "
          "reads the whole 20.00 MiB, although the three sizes you ask for add up to at most "
          f"{format_size(FULL_BELOW_01)}.",
          "a list of three sizes, each in bytes, or a string with a unit (B, KiB, MiB, GiB)",
          hints=("Which requests are in the large pool, and which of them share a 20 MiB segment? "
                 "Look at the round_size table.",
                 "Rule 2: a large-pool remainder is split off only when it is more than 1 MiB. "
                 "What happens to a smaller one?",
                 "Let the third tensor leave a remainder of 1 MiB or less: the block is not split, "
                 "and the tensor gets the whole rest of the segment."),
          stub=[MiB, MiB, MiB])
def _judge_01(answer):
    from gpumemlab.allocator.rounding import is_small, round_size
    from gpumemlab.devices.simulated import SimulatedGPU

    sizes = sizes_answer(answer, 3)
    gpu = SimulatedGPU("8GiB", alloc_conf="")
    live = [gpu.empty(n) for n in sizes]
    segments = gpu.memory_snapshot()
    allocated = gpu.memory_allocated()
    figures = {"sizes": sizes, "segments": [s["total_size"] for s in segments],
               "cudaMalloc": gpu.memory_stats()["num_device_alloc"], "allocated": allocated}
    small = [format_size(n) for n in sizes if is_small(round_size(n))]
    if small:
        return False, (f"{', '.join(small)} {'is' if len(small) == 1 else 'are'} in the small "
                       f"pool (at most 1 MiB after rounding)"), figures
    shown = ", ".join(format_size(s) for s in figures["segments"])
    del live
    if not (len(segments) == 1 and segments[0]["total_size"] == 20 * MiB):
        return False, f"the card has {count(len(segments), 'segment')} of {shown}", figures
    if sum(sizes) > FULL_BELOW_01:
        return False, (f"one 20 MiB segment, but your sizes add up to {format_size(sum(sizes))}, "
                       f"more than {format_size(FULL_BELOW_01)}"), figures
    if allocated != 20 * MiB:
        return False, (f"one 20 MiB segment, but memory_allocated() reads {format_size(allocated)}: "
                       f"{format_size(20 * MiB - allocated)} of it is a free block"), figures
    return True, (f"sizes adding up to {format_size(sum(sizes))} hold all 20.00 MiB of one "
                  f"segment: the last remainder was too small to split off"), figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
def cache_reuse(gpu, *, steps: int = 5, release: bool = True):
    """Each step: a 1-byte tensor (small pool), 1 MiB + 1 byte (large pool, a 20 MiB segment)
    and 1/16 of the device, all freed at the end of the step."""
    run = ScenarioRun(gpu, "cache_reuse")
    sizes = (1, MiB + 1, device_chunk(gpu, 16))
    for step in range(steps):
        for i, n in enumerate(sizes):
            run.alloc(i, n, f"step {step}: tensor {i}")
        for i in range(len(sizes)):
            run.free(i, f"step {step}: tensor {i} freed")
    run.rec.notes.update(sizes=list(sizes), steps=steps)
    return run.finish(release)


# -- 01: the baseline without a cache
class UncachedGPU:
    """PyTorch with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: no cache at all. c10's
    ``uncached_allocate`` cudaMallocs each tensor at its own size and ``uncached_delete``
    cudaFrees it when it dies, so every allocation and every free is a driver call. ``empty()``
    returns a buffer that is freed by ``free()`` or when its last reference goes, as a tensor is.
    The driver is the allocator model's (``CudaDriver``), so capacity and OOM hold as well.
    """

    kind = "simulated"

    def __init__(self, total_memory="8GiB"):
        from gpumemlab.allocator.driver import CudaDriver
        from gpumemlab.units import parse_size
        self.driver = CudaDriver(parse_size(total_memory, name="total_memory"))
        self.stats = {"num_device_alloc": 0, "num_device_free": 0, "allocation.all.allocated": 0}

    def empty(self, nbytes: int):
        ptr = self.driver.cuda_malloc(nbytes)
        if ptr is None:
            raise MemoryError(f"cudaMalloc({format_size(nbytes)}) failed: out of memory")
        self.stats["num_device_alloc"] += 1
        self.stats["allocation.all.allocated"] += 1
        return _DriverBuffer(self, ptr)

    def memory_stats(self) -> dict:
        return dict(self.stats)


class _DriverBuffer:
    __slots__ = ("_gpu", "ptr")

    def __init__(self, gpu, ptr):
        self._gpu, self.ptr = gpu, ptr

    def free(self) -> None:
        if self._gpu is not None:
            gpu, self._gpu = self._gpu, None
            gpu.driver.cuda_free(self.ptr)   # a cudaFree per tensor: it waits for the device
            gpu.stats["num_device_free"] += 1

    def __del__(self):
        self.free()


# -- the lesson's predict questions (their words are in the lesson; these keep the unit after a
# kernel restart, and name the rule behind the usual wrong answers)
question("01.p1", "number", unit="cudaMalloc calls", misconceptions=(
    Misconception(lambda a: 360, "That is one cudaMalloc per tensor: the cache serves steps 2 to 10 "
                  "from the blocks step 1 freed, without asking the driver again."),
    Misconception(lambda a: 36, "Not even step 1 needs one cudaMalloc per tensor: small requests "
                  "share 2 MiB segments and requests under 10 MiB share 20 MiB ones."),
))
question("01.p2", "size", misconceptions=(
    Misconception(lambda a: a - K_SMALL_BUFFER, "2 MiB short: either the 1-byte tensor's own 2 MiB "
                  "small-pool segment, or the 60 MiB + 1 B tensor's segment, rounded up to a "
                  "multiple of 2 MiB (62 MiB)."),
    Misconception(lambda a: a - K_LARGE_BUFFER + K_SMALL_BUFFER, "18 MiB short: a 1 MiB + 1 B request is large (over "
                  "1 MiB), so it gets a 20 MiB segment, not a 2 MiB one."),
))
