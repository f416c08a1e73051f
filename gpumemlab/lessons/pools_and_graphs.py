"""Lesson 11's workload and exercise: CUDA graphs for several batch sizes captured into one shared
private pool, where the capture order decides how much the pool reserves. The exercise asks for every
order that does not start with the largest batch yet reserves as little; the judge captures all
24 on fresh ``SimulatedGPU`` cards at judge time (see ``lesson_exercises`` for the contract)."""
from __future__ import annotations

from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
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


BATCHES_11 = (8, 4, 2, 1)    # the lesson's four graphs; largest first is the order it recommends


def reserved_11(order) -> int:
    """What the shared pool reserves once the graphs are captured in ``order`` (bytes)."""
    gpu, _graphs, _outs = capture_graphs(list(order))
    return gpu.memory_reserved()


def _orders_answer(answer) -> list:
    want = sorted(BATCHES_11)
    if not isinstance(answer, list) or not all(
            isinstance(o, list) and sorted(o) == want and
            all(isinstance(b, int) and not isinstance(b, bool) for b in o) for o in answer):
        raise AnswerShapeError(f"the answer is a list of orders, each a list of the batch sizes "
                               f"{list(BATCHES_11)} in some order")
    orders = [tuple(o) for o in answer]
    if len(set(orders)) != len(orders):
        raise AnswerShapeError("an order is listed twice")
    return orders


@exercise("11.ex", "capture orders that need not start with the largest",
          "Four CUDA graphs, for batch sizes 8, 4, 2 and 1, are captured one after the other into "
          "one shared pool (gpumemlab.lessons.pools_and_graphs.capture_graphs). Captured largest "
          "first, the pool reserves the least any order can. List EVERY order in which batch 8 "
          "is NOT captured first and the pool still reserves no more than largest first. Work "
          "it out from the segment rules and the captured step (help(captured_step)), then check.",
          "a list of orders, each a list of the four batch sizes",
          hints=("Batch b's step asks for three temporaries of 3 MiB x b, freed at the end of its "
                 "capture, and an output of 1 MiB x b that stays.",
                 "The segment rules of lesson 01: a request of 10 MiB or more gets a segment of "
                 "its own size (rounded up to 2 MiB); one between 1 and 10 MiB gets a 20 MiB "
                 "segment that later such requests share.",
                 "A freed block serves any later request up to its size, never a bigger one. "
                 "Which batches' temporaries get segments of their own, and which of them must "
                 "therefore come after which?"),
          stub=[])
def _judge_11(answer):
    from itertools import permutations

    orders = _orders_answer(answer)
    largest_first = tuple(sorted(BATCHES_11, reverse=True))
    least = reserved_11(largest_first)
    reserved = {o: reserved_11(o) for o in permutations(BATCHES_11)}
    wanted = {o for o, r in reserved.items() if o[0] != largest_first[0] and r <= least}
    figures = {"orders": [list(o) for o in orders], "least_reserved": least,
               "reserved": {"-".join(map(str, o)): reserved[o] for o in orders}}
    first = [o for o in orders if o[0] == largest_first[0]]
    if first:
        return False, (f"{list(first[0])} captures batch {largest_first[0]} first: the task asks "
                       f"for the orders that do not"), figures
    more = [o for o in orders if o not in wanted]
    if more:
        o = more[0]
        why = f"{list(o)} reserves {format_size(reserved[o])}, more than {format_size(least)}"
        if o == tuple(sorted(BATCHES_11)):
            why += ": that is the smallest-first order the lesson ran"
        elif o.index(4) < o.index(8):
            why += (": batch 4 comes before batch 8, so its three 12 MiB temporaries (10 MiB or "
                    "more: a segment each) are opened before batch 8's 24 MiB ones exist to be "
                    "freed and reused")
        return False, why, figures
    if not orders:
        return False, (f"no order listed: captured largest first the pool reserves "
                       f"{format_size(least)}; which other orders reserve no more?"), figures
    if len(orders) < len(wanted):
        why = (f"each order you list reserves {format_size(least)}, but {len(wanted) - len(orders)} "
               f"more order(s) do as well")
        if all(o[1] == largest_first[0] for o in orders):
            why += f": batch {largest_first[0]} need not be captured second"
        return False, why, figures
    return True, (f"these {len(orders)} orders reserve {format_size(least)}, as largest first "
                  f"does: what matters is which captures come after batch "
                  f"{largest_first[0]}, not that it comes first"), figures


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
