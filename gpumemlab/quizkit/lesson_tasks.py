"""The exercises of lessons 01-04 (see ``lesson_exercises`` for the contract): each judge runs the
learner's plain answer on a fresh ``SimulatedGPU`` and returns (passed, message, figures).
"""
from __future__ import annotations

from gpumemlab.units import MiB, format_size, parse_size
from .exercise_base import AnswerShapeError, exercise


def sizes_answer(answer, count: int) -> list:
    """``answer`` as ``count`` request sizes in bytes (ints or strings like '3 MiB')."""
    if not isinstance(answer, list) or len(answer) != count:
        raise AnswerShapeError(f"the answer must be a list of {count} sizes")
    out = []
    for i, value in enumerate(answer):
        try:
            out.append(parse_size(value, name=f"size {i}"))
        except (TypeError, ValueError) as exc:
            raise AnswerShapeError(str(exc)) from None
    return out


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
