"""Lesson 06, expandable segments: its exercise (the largest tensor that fits after lesson 02's
frees once the holes are unmapped).
"""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import exercise, size_answer
from gpumemlab.units import format_size, GiB, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 06: with expandable segments, the largest tensor that fits after the frees of lesson 02
def fragmented_06(conf: str, total_memory="8GiB", request=None):
    """Lesson 02's workload under ``conf``: a 7 GiB tensor dies, seven 1 GiB tensors, every
    other one freed; then ``request`` bytes (if given). Returns (gpu, kept tensors, ok)."""
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(total_memory, alloc_conf=conf)
    warm = gpu.empty(7 * GiB)
    del warm
    blocks = [gpu.empty(GiB) for _ in range(7)]
    keep = [b for i, b in enumerate(blocks) if i % 2 == 1]
    del blocks
    ok = None
    if request is not None:
        try:
            keep.append(gpu.empty(request))
            ok = True
        except OutOfMemoryError:
            ok = False
    return gpu, keep, ok


PAGE_06 = 20 * MiB


@exercise("06.ex", "the largest tensor after the holes are unmapped",
          "Lesson 02's 8 GiB card under expandable_segments:True: a 7 GiB tensor dies, seven "
          "1 GiB tensors are made and tensors 0, 2, 4 and 6 are freed "
          "(gpumemlab.lessons.expandable_segments.fragmented_06). What is the largest single "
          "tensor that can then be allocated? Answer to within one 20 MiB page.",
          "a size: bytes, or a string with a unit (B, KiB, MiB, GiB)",
          hints=("With expandable segments, free holes can be unmapped: their physical memory "
                 "goes back to the driver and can be mapped again elsewhere.",
                 "Count what stays: the live tensors, and the pages they only partly fill.",
                 "Try sizes on fragmented_06('expandable_segments:True', request=...) and bisect."),
          stub="2 GiB")
def _judge_06(answer):
    size = size_answer(answer, name="the size")
    conf = "expandable_segments:True"
    fits = size > 0 and fragmented_06(conf, request=size)[2]
    bigger = fragmented_06(conf, request=size + PAGE_06)[2] if fits else None
    figures = {"size": size, "fits": bool(fits), "one_page_more_fits": bigger}
    if not fits:
        return False, f"a {format_size(size)} tensor does not fit", figures
    if bigger:
        return False, (f"{format_size(size)} fits, and so does {format_size(size + PAGE_06)}: "
                       f"there is room for more"), figures
    return True, (f"{format_size(size)} fits and one page more ({format_size(size + PAGE_06)}) "
                  f"does not"), figures


# -- the lesson's predict questions (see why_a_cache)
question("06.p1", "number", unit="segments", misconceptions=(
    Misconception(lambda a: 1, "The small pool and the large pool never share a segment: the "
                  "1-byte tensor keeps its own 2 MiB one."),
    Misconception(lambda a: 3, "Expandable segments map new pages into one growing segment per "
                  "pool: the two large tensors share it."),
))
question("06.p2", "choice", choices=("yes", "no: out of memory"), misconceptions=(
    Misconception("no: out of memory", "An expandable segment is one virtual range whose physical "
                  "pages are mapped as needed: the free pages between live tensors can be "
                  "unmapped (`release_cached_blocks`) and mapped again at the segment's end, so "
                  "the request needs free memory, not one contiguous free block."),
))
