"""The exercises of lessons 01-04 (see ``lesson_exercises`` for the contract): each judge runs the
learner's plain answer on a fresh ``SimulatedGPU`` and returns (passed, message, figures).
"""
from __future__ import annotations

from gpumemlab.units import MiB, format_size, parse_size
from .exercise_base import AnswerShapeError, exercise


def size_answer(answer, name: str = "the size") -> int:
    """``answer`` (an int of bytes or a string like '3 MiB') in bytes; a wrong shape is the
    learner's AnswerShapeError, not a traceback."""
    try:
        return parse_size(answer, name=name)
    except (TypeError, ValueError) as exc:
        raise AnswerShapeError(str(exc)) from None


def sizes_answer(answer, count: int) -> list:
    """``answer`` as ``count`` request sizes in bytes (ints or strings like '3 MiB')."""
    if not isinstance(answer, list) or len(answer) != count:
        raise AnswerShapeError(f"the answer must be a list of {count} sizes")
    return [size_answer(value, name=f"size {i}") for i, value in enumerate(answer)]


# -- 01: three tensors, one shared 20 MiB segment
@exercise("01.ex", "three tensors in one 20 MiB segment",
          "Choose the sizes of three tensors, each of them in the LARGE pool, so that all three "
          "live in one and the same 20 MiB segment of a fresh card: one cudaMalloc, no more.",
          "a list of three sizes, like [4 * MiB, '3 MiB', 1234567]",
          hints=("Which requests are in the large pool? Look at the round_size table.",
                 "Large requests up to 10 MiB get a 20 MiB segment; the rest of it is split off "
                 "and serves the next requests.",
                 "Three sizes a bit over 1 MiB, whose rounded sum stays below 20 MiB."),
          stub=[MiB, MiB, MiB])
def _judge_01(answer):
    from gpumemlab.allocator.rounding import is_small, round_size
    from gpumemlab.devices.simulated import SimulatedGPU

    sizes = sizes_answer(answer, 3)
    gpu = SimulatedGPU("8GiB", alloc_conf="")
    live = [gpu.empty(n) for n in sizes]
    segments = gpu.memory_snapshot()
    figures = {"sizes": sizes, "segments": [s["total_size"] for s in segments],
               "cudaMalloc": gpu.memory_stats()["num_device_alloc"]}
    small = [format_size(n) for n in sizes if is_small(round_size(n))]
    if small:
        return False, (f"{', '.join(small)} {'is' if len(small) == 1 else 'are'} in the small "
                       f"pool (at most 1 MiB after rounding)"), figures
    shown = ", ".join(format_size(s) for s in figures["segments"])
    del live
    if len(segments) == 1 and segments[0]["total_size"] == 20 * MiB:
        return True, "one cudaMalloc of 20 MiB holds all three tensors", figures
    return False, f"the card has {len(segments)} segment(s) of {shown}", figures


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
          "a list of four tensor numbers from 0 to 6, like [0, 2, 4, 6]",
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


def exact(n: int) -> str:
    """A size and its byte count, for answers judged to the byte."""
    return f"{format_size(n)} ({n:,} bytes)"


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
          "a list of phase numbers from 0 to 5, like [1, 4] (or [] for never)",
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
