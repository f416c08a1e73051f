"""Lesson 11's workload and exercise: CUDA graphs for several batch sizes captured into one shared
private pool, where the capture order decides how much the pool reserves. The judge runs the
learner's order on a fresh ``SimulatedGPU`` and compares it with every order (see
``lesson_exercises`` for the contract)."""
from __future__ import annotations

from itertools import permutations

from gpumemlab.units import MiB, format_size
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import question

BATCHES_11 = (8, 4, 2, 1)
CARD_11 = "8GiB"


def captured_step(gpu, batch: int):
    """One forward step for ``batch`` sequences, as a capture sees it: three activations of
    3 MiB a sequence that die, and an output of 1 MiB a sequence that stays (the graph's output
    buffer). Returns the output."""
    temps = [gpu.empty(3 * MiB * batch) for _ in range(3)]
    out = gpu.empty(MiB * batch)
    del temps
    return out


def capture_graphs(batches, share: bool = True, total_memory=CARD_11):
    """Capture one graph per batch size, in this order, on a fresh card; with ``share`` all into
    one pool from ``graph_pool_handle()``. Returns (gpu, graphs, outputs): keep them, they hold
    the pool."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(total_memory, alloc_conf="")
    handle = gpu.graph_pool_handle() if share else None
    graphs, outs = [], []
    for b in batches:
        g = gpu.CUDAGraph()
        with gpu.graph(g, pool=handle):
            outs.append(captured_step(gpu, b))
        graphs.append(g)
    return gpu, graphs, outs


def reserved_for_order(batches) -> int:
    gpu, graphs, outs = capture_graphs(batches)
    return gpu.memory_reserved()


def _order_answer(answer) -> list:
    if not isinstance(answer, list) or not all(isinstance(b, int) and not isinstance(b, bool)
                                               for b in answer):
        raise AnswerShapeError("the answer is a list of batch sizes, like [1, 2, 4, 8]")
    if sorted(answer) != sorted(BATCHES_11):
        raise AnswerShapeError(f"the list must hold each of the batch sizes {list(BATCHES_11)} "
                               f"exactly once, got {answer}")
    return answer


@exercise("11.ex", "a capture order for a shared graph pool",
          "Four CUDA graphs, for batch sizes 8, 4, 2 and 1, are captured one after the other into "
          "one shared pool (gpumemlab.lessons.pools_and_graphs.capture_graphs). Give an order of "
          "capture under which the pool reserves as little as under any order.",
          "a list of the four batch sizes, like [1, 2, 4, 8]",
          hints=("Each capture's temporaries are freed into the pool when it ends: what can the "
                 "next capture reuse?",
                 "A cached block serves any request up to its size (and is split); never a "
                 "bigger one.",
                 "Capture the biggest batch first, then the smaller ones."),
          stub=[1, 2, 4, 8])
def _judge_11(answer):
    order = _order_answer(answer)
    mine = reserved_for_order(order)
    best = min(reserved_for_order(list(p)) for p in permutations(BATCHES_11))
    figures = {"order": order, "reserved_bytes": mine, "best_reserved_bytes": best}
    if mine == best:
        return True, (f"capturing {order} the shared pool reserves {format_size(mine)}, as "
                      f"little as any order"), figures
    return False, (f"capturing {order} the shared pool reserves {format_size(mine)}; some order "
                   f"needs only {format_size(best)}"), figures


# -- the lesson's predict questions (see caching_allocator)
question("11.p1", "size")
question("11.p2", "size")
question("11.p3", "size")
question("11.p4", "size")
