"""Lesson 11's workload and exercise: CUDA graphs for several batch sizes captured into one shared
private pool, where the capture order decides how much the pool reserves. The exercise asks what
an order the lesson never runs reserves; the judge captures it on a fresh ``SimulatedGPU`` at
judge time (see ``lesson_exercises`` for the contract)."""
from __future__ import annotations

from gpumemlab.units import MiB
from gpumemlab.quizkit.exercise_base import exact, exercise, size_answer
from gpumemlab.quizkit.predict_rules import Misconception, question

CARD_11 = "8GiB"


def captured_step(gpu, batch: int):
    """One forward step for ``batch`` sequences, as a capture sees it: three activations of
    3 MiB a sequence that die, and an output of 1 MiB a sequence that stays (the graph's output
    buffer). Returns the output."""
    temps = [gpu.empty(3 * MiB * batch) for _ in range(3)]
    out = gpu.empty(MiB * batch)
    del temps
    return out


def capture_graphs(batches, share: bool = True, total_memory=CARD_11, alloc_conf: str = ""):
    """Capture one graph per batch size, in this order, on a fresh card (allocator settings
    ``alloc_conf``); with ``share`` all into one pool from ``graph_pool_handle()``. Returns
    (gpu, graphs, outputs): keep them, they hold the pool."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(total_memory, alloc_conf=alloc_conf)
    handle = gpu.graph_pool_handle() if share else None
    graphs, outs = [], []
    for b in batches:
        g = gpu.CUDAGraph()
        with gpu.graph(g, pool=handle):
            outs.append(captured_step(gpu, b))
        graphs.append(g)
    return gpu, graphs, outs


ORDER_11 = [4, 8, 2, 1]      # an order the lesson never runs: the exercise asks what it reserves


@exercise("11.ex", "what a capture order reserves",
          "Four CUDA graphs, for batch sizes 8, 4, 2 and 1, are captured one after the other into "
          "one shared pool (gpumemlab.lessons.pools_and_graphs.capture_graphs), in the order "
          f"{ORDER_11}: the middle batch first. How much memory does the pool reserve once all "
          "four are captured? Work it out from the segment rules and the captured step "
          "(help(captured_step)), then check.",
          "a size, like '94 MiB' or a number of bytes (exact: reserved memory is whole segments)",
          hints=("Batch b's step asks for three temporaries of 3 MiB x b, freed at the end of its "
                 "capture, and an output of 1 MiB x b that stays.",
                 "The segment rules of lesson 01: a request of 10 MiB or more gets a segment of "
                 "its own size (rounded up to 2 MiB); one between 1 and 10 MiB gets a 20 MiB "
                 "segment that later such requests share.",
                 "A freed block in the pool serves any later request up to its size, never a "
                 "bigger one: go capture by capture and add up the segments each one needs."),
          stub="0 MiB")
def _judge_11(answer):
    size = size_answer(answer, name="the reserved memory")
    gpu, graphs, outs = capture_graphs(ORDER_11)
    reserved = gpu.memory_reserved()
    segments = len(gpu.memory_snapshot())
    figures = {"answer_bytes": size, "order": ORDER_11, "segments": segments}
    if size == reserved:
        return True, (f"capturing {ORDER_11}, the shared pool reserves {exact(reserved)} in "
                      f"{segments} segments"), figures
    side = "less" if size > reserved else "more"
    return False, (f"capturing {ORDER_11}, the shared pool reserves {side} than "
                   f"{exact(size)}"), figures


# -- the lesson's predict questions (see why_a_cache)
def _largest_first(_actual) -> int:
    gpu, graphs, outs = capture_graphs([8, 4, 2, 1])
    return gpu.memory_reserved()


question("11.p1", "size", misconceptions=(
    Misconception(lambda a: 20 * MiB, "20 MiB is the live bytes (and what the small-first "
                  "orders reserve): big first, the 12 MiB request (10 MiB or more) gets a "
                  "segment of its own, and the two 4 MiB tensors then open a 20 MiB one."),
))
question("11.p2", "size", misconceptions=(
    Misconception(lambda a: 8 * MiB, "The 8 MiB the eight tensors left in the small pool "
                  "cannot serve a request over 1 MiB: 1 MiB + 1 B opens a 20 MiB large segment "
                  "beside them."),
))
question("11.p3", "size")
question("11.p5", "size", misconceptions=(
    Misconception(lambda a: 128 * MiB, "128 MiB is what the four tensors need, and what the "
                  "eight freed blocks add up to; but each 16 MiB block is a segment of its own, "
                  "segments never merge, so no freed block can serve 32 MiB."),
))
question("11.p4", "size", misconceptions=(
    Misconception(_largest_first, "That is what the largest-first order reserves: smallest "
                  "first, each larger capture finds only freed blocks too small for it and "
                  "opens new segments."),
))


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
LARGEST_FIRST_11 = (8, 4, 2, 1)


def graph_capture_order(gpu, *, orders=(LARGEST_FIRST_11, tuple(reversed(LARGEST_FIRST_11))),
                        release: bool = True):
    """Lesson 11's captures as plain allocations: for each order, one graph per batch size
    captured into one shared pool (``graph_pool_handle``), each capture making three 3 MiB-a-
    sequence activations that die and a 1 MiB-a-sequence output that stays; then the outputs are
    freed, the graphs reset and the cache emptied before the next order.
    ``notes["pool_reserved"]``: what each order's shared pool reserved (bytes), in order."""
    from gpumemlab.devices.scenarios import ScenarioRun

    run = ScenarioRun(gpu, "graph_capture_order")
    reserved = [run.capture_shared_pool(f"order {k}", order, 3 * MiB, MiB)
                for k, order in enumerate(orders)]
    run.rec.notes.update(orders=[list(o) for o in orders], pool_reserved=reserved)
    return run.finish(release)
