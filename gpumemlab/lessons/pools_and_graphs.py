"""Lesson 13's workload and exercise: CUDA graphs for several batch sizes captured into one shared
private pool, where the capture order decides how much the pool reserves. The exercise asks, for a
second model whose captured step the lesson's functions do not model, for every order that reserves
more than largest first; the judge captures all 24 on fresh
``SimulatedGPU`` cards at judge time (see ``lesson_exercises`` for the contract)."""
from __future__ import annotations

from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question

CARD_13 = "8GiB"


def captured_step(gpu, batch: int):
    """One forward step for ``batch`` sequences, as a capture sees it: three activations of
    3 MiB a sequence that die, and an output of 1 MiB a sequence that stays (the graph's output
    buffer). Returns the output."""
    temps = [gpu.empty(3 * MiB * batch) for _ in range(3)]
    out = gpu.empty(MiB * batch)
    del temps
    return out


def capture_graphs(batches, share: bool = True, total_memory=CARD_13, alloc_conf: str = ""):
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


BATCHES_13 = (8, 4, 2, 1)    # the lesson's four graphs; largest first is the order it recommends


def reserved_13(order) -> int:
    """What the shared pool reserves once the graphs are captured in ``order`` (bytes)."""
    gpu, _graphs, _outs = capture_graphs(list(order))
    return gpu.memory_reserved()


def steps_13(order) -> list:
    """What the shared pool reserves after each capture of ``order`` (bytes, one a capture)."""
    # each prefix on a fresh card: the state after capture k is that of the first k captures
    return [reserved_13(order[:k]) for k in range(1, len(order) + 1)]


def growth_13(order) -> list:
    """The batches of ``order`` after whose capture the shared pool reserves more than before
    (the first capture always does)."""
    steps = steps_13(order)
    return [b for k, b in enumerate(order) if k and steps[k] > steps[k - 1]]


# The exercise's second model: its step is not the lesson's (no function here captures it), so
# the lesson's own captures over all 24 orders answer the lesson's case, not this one.
TEMP_PER_SEQ_13EX, OUT_PER_SEQ_13EX = 3 * MiB, MiB   # one temporary, one output


def _second_model_reserved(order) -> int:
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(CARD_13, alloc_conf="")
    handle = gpu.graph_pool_handle()
    graphs, outs = [], []
    for b in order:
        g = gpu.CUDAGraph()
        with gpu.graph(g, pool=handle):
            temp = gpu.empty(TEMP_PER_SEQ_13EX * b)
            outs.append(gpu.empty(OUT_PER_SEQ_13EX * b))
            del temp
        graphs.append(g)
    return gpu.memory_reserved()


def _orders_answer(answer) -> list:
    want = sorted(BATCHES_13)
    if not isinstance(answer, list) or not all(
            isinstance(o, list) and sorted(o) == want and
            all(isinstance(b, int) and not isinstance(b, bool) for b in o) for o in answer):
        raise AnswerShapeError(f"the answer is a list of orders, each a list of the batch sizes "
                               f"{list(BATCHES_13)} in some order")
    orders = [tuple(o) for o in answer]
    if len(set(orders)) != len(orders):
        raise AnswerShapeError("an order is listed twice")
    return orders


_STEP_13EX = (f"ONE temporary of {TEMP_PER_SEQ_13EX // MiB} MiB a sequence that dies at the "
              f"end of the capture, and an output of {OUT_PER_SEQ_13EX // MiB} MiB a sequence "
              f"that stays")


@exercise("13.ex", "capture orders for a second model",
          "A second model is served the same way: graphs for batch sizes 8, 4, 2 and 1 captured "
          "one after the other into one shared pool. Its captured step is not the lesson's: "
          f"batch b makes {_STEP_13EX} (where the lesson's makes three temporaries). List EVERY "
          "order of the four captures in which the pool reserves MORE than with batch 8 first "
          "(8, 4, 2, 1). No function of the lesson captures this step: work it out from the "
          "segment rules, as the lesson's 24 orders did for its own step, then check.",
          "a list of orders, each a list of the four batch sizes",
          hints=("Write down each batch's two requests in MiB, the temporary and the output. "
                 "Which are 10 MiB or more (a segment of exactly their size), which between 1 and "
                 "10 MiB (a 20 MiB segment that later such requests share), which at most 1 MiB "
                 "(the small pool)? Which segments does largest first open?",
                 "A request of 10 MiB or more opens a segment of its own size only when no free "
                 "block is big enough: a free block of any larger segment serves it, split. "
                 "Which captures leave such a block behind, and for which batch's temporary?",
                 "An order reserves more exactly when it opens a segment that largest first does "
                 "not open. Which request can do that, and only from which place in the order?"),
          stub=[])
def _judge_13(answer):
    from itertools import permutations

    orders = _orders_answer(answer)
    everyone = list(permutations(BATCHES_13))
    largest_first = tuple(sorted(BATCHES_13, reverse=True))
    reserved = {o: _second_model_reserved(o) for o in everyone}
    least = reserved[largest_first]
    wanted = {o for o, r in reserved.items() if r > least}
    # the figures name no order's reserved memory until the list is right, and the message is
    # the same for every order listed alone: probing the orders one by one tells nothing
    figures = {"orders_listed": len(orders), "largest_first_reserves": least}
    if set(orders) == wanted:
        figures["reserved"] = {"-".join(map(str, o)): reserved[o] for o in orders}
        t = {b: format_size(TEMP_PER_SEQ_13EX * b) for b in BATCHES_13}
        return True, (f"these {len(orders)} orders reserve more than {format_size(least)}: only "
                      f"batch 4 captured first opens a segment of exactly its {t[4]} temporary, "
                      f"which no other order opens. Any other first capture either opens batch "
                      f"8's own segment or a 20 MiB one (batch 1's {t[1]} or batch 2's {t[2]} "
                      f"temporary) that batch 4's temporary can split later and batch 8's output "
                      f"needs anyway"), figures
    if not orders:
        return False, (f"no order listed: with batch 8 first the pool reserves "
                       f"{format_size(least)}; which orders reserve more?"), figures
    lessons_step = {o for o in everyone if reserved_13(o) > reserved_13(largest_first)}
    if set(orders) == lessons_step:
        return False, ("these are the orders that reserve more for the lesson's own step (three "
                       "temporaries a capture); this model makes one: redo which requests find a "
                       "free block big enough"), figures
    if set(orders) == {o for o in everyone if o[0] != largest_first[0]}:
        return False, ("not every order that starts with another batch than 8 reserves more: "
                       "which first captures open a segment that largest first also opens?"), \
            figures
    return False, (f"the {len(orders)} order(s) listed are not exactly the orders in "
                   f"which the pool reserves more than {format_size(least)} (batch 8 first). The "
                   f"judge says no more than that, order by order: reason from the segment "
                   f"rules"), figures


# -- the lesson's predict questions (see why_a_cache)
question("13.p1", "size", misconceptions=(
    Misconception(lambda a: 40 * MiB, "The pool's free 40 MiB block never serves a request "
                  "outside the pool, and empty_cache() leaves a live pool's cache alone: the "
                  "tensor outside opens a segment of its own beside it."),
))
def _largest_first(_actual) -> int:
    gpu, graphs, outs = capture_graphs([8, 4, 2, 1])
    return gpu.memory_reserved()


def _smallest_first_rule() -> str:
    # computed when shown: which captures grow the pool, and by how much, are the simulator's
    order = tuple(sorted(BATCHES_13))
    steps, grew = steps_13(order), growth_13(order)
    kept = [b for b in order[1:] if b not in grew]
    said = (f"That is what the largest-first order reserves. Smallest first, the pool reserves "
            f"{', '.join(format_size(r) for r in steps)} after the captures of batches "
            f"{', '.join(map(str, order))}: it grows at batch{'es' if len(grew) > 1 else ''} "
            f"{' and '.join(map(str, grew))}, "
            f"whose temporaries find only freed blocks too small for them and open new segments")
    if kept:
        said += (f"; batch {' and '.join(map(str, kept))} still fit{'s' if len(kept) == 1 else ''}"
                 f" in what the earlier captures freed")
    return said + "."


question("13.p2", "size", misconceptions=(
    Misconception(_largest_first, _smallest_first_rule),
))


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
LARGEST_FIRST_13 = (8, 4, 2, 1)


def graph_capture_order(gpu, *, orders=(LARGEST_FIRST_13, tuple(reversed(LARGEST_FIRST_13))),
                        release: bool = True):
    """Lesson 13's captures as plain allocations: for each order, one graph per batch size
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
