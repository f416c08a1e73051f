"""One right answer per lesson exercise, for the tests. The judge itself (the simulator) decides
whether it is right; every answer that is a figure of the simulator (a size, a batch, a block
size) is found by running it (a bisection, a search, the metric that defines it), as a function
computed when called. tests/lessons/test_lesson_exercises.py checks that the judge accepts each one;
tests/notebooks/test_lessons_give_nothing_away.py checks that no lesson prints it."""
from __future__ import annotations

from gpumemlab.units import MiB

RIGHT = {
    "01.ex": ["9 MiB", "7 MiB", 3 * MiB + MiB // 4],
    "02.ex": [1, 2, 3, 6],
    "04.ex": [2],
    "10.ex": "out.argmax(1).tolist()",
}


def _segments_to_empty_03():
    # the reasoning itself: empty_cache() returns only whole free segments, so emptying a segment
    # costs its live bytes and returns its size; pick the set that returns the most within the
    # budget (a knapsack over the snapshot's numbers, by the live bytes spent)
    from gpumemlab.lessons.reading_the_evidence import FREE_AT_MOST_03, evidence_state
    gpu, _held = evidence_state()
    plans = {0: (0, [])}
    for i, s in enumerate(gpu.memory_snapshot()):
        live = sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
        if not 0 < live <= FREE_AT_MOST_03:
            continue
        for spent, (gain, chosen) in list(plans.items()):
            if spent + live <= FREE_AT_MOST_03 and plans.get(spent + live, (-1,))[0] < gain + s["total_size"]:
                plans[spent + live] = (gain + s["total_size"], chosen + [i])
    return max(plans.values())[1]


RIGHT["03.ex"] = _segments_to_empty_03


def _largest_max_split_05():
    # bisect N on the simulator, between a setting that fits and one that does not
    from gpumemlab.lessons.allocator_settings import run_05
    lo, hi = 20, 8192
    assert run_05(f"max_split_size_mb:{lo}")[1] is None and run_05(f"max_split_size_mb:{hi}")[1]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if run_05(f"max_split_size_mb:{mid}")[1] is None else (lo, mid)
    return f"max_split_size_mb:{lo}"


RIGHT["05.ex"] = _largest_max_split_05


def _order_12():
    # the reasoning: the 3 MiB tensor opens a 20 MiB segment whose 17 MiB rest then holds the
    # 16 MiB tensor exactly (a request of 10 MiB or more takes a free block big enough); the three
    # 6 MiB tensors share a second 20 MiB segment. Two segments, the least 37 MiB can take.
    from gpumemlab.lessons.allocation_order import SIZES_12
    mib = [n >> 20 for n in SIZES_12]
    small, big = min(mib), max(mib)
    return [small, big] + [n for n in mib if n not in (small, big)]


RIGHT["12.ex"] = _order_12


def _orders_13():
    # the reasoning, for the exercise's second model (one temporary of 3 MiB a sequence): largest
    # first opens batch 8's 24 MiB segment, a 20 MiB one for its 8 MiB output and a 2 MiB
    # small-pool one for batch 1's output. Batch 1's or 2's temporary (3 or 6 MiB) opens a 20 MiB
    # segment that batch 4's 12 MiB one can then split and batch 8's output needs anyway; batch 4
    # first opens a 12 MiB segment of its own, which no other order has. So: the orders with 4 first
    from itertools import permutations
    from gpumemlab.lessons.pools_and_graphs import BATCHES_13
    return [list(o) for o in permutations(BATCHES_13) if o[0] == 4]


RIGHT["13.ex"] = _orders_13


def _tensors_to_free_06():
    # the reasoning: the tensors sit one after another from the segment's start; a run of freed
    # neighbours gives back the whole 20 MiB pages inside it (past the last tensor, the rest of
    # its page too), a page it shares with a kept tensor stays mapped. Choose the runs, each
    # followed by a kept tensor, that give back the most pages within the budget
    from functools import lru_cache
    from gpumemlab.lessons.expandable_segments import FREE_AT_MOST_06, PAGE_06, SIZES_06
    ends = [sum(SIZES_06[:i + 1]) * MiB for i in range(len(SIZES_06))]
    n = len(SIZES_06)

    def pages(a, b):
        start = ends[a - 1] if a else 0
        top = -(-ends[b] // PAGE_06) if b == n - 1 else ends[b] // PAGE_06
        return max(0, top - -(-start // PAGE_06))

    @lru_cache(maxsize=None)
    def best(i, left):
        if i >= n:
            return 0, ()
        top = best(i + 1, left)
        for b in range(i, n):
            cost = sum(SIZES_06[i:b + 1]) * MiB
            if cost > left:
                break
            got, plan = best(b + 2, left - cost)
            if pages(i, b) + got > top[0]:
                top = pages(i, b) + got, tuple(range(i, b + 1)) + plan
        return top
    return list(best(0, FREE_AT_MOST_06)[1])


RIGHT["06.ex"] = _tensors_to_free_06


def _layers_to_checkpoint_07():
    # the reasoning: at layer i's backward the card holds the weights, the outputs of layers 0..i,
    # a gradient, layer i's own internals (kept or made again) and the internals kept before i;
    # each layer bounds what the layers before it keep. Keep the most internals under every
    # bound: a subset sum over the layers in order, the states pruned by each bound
    from gpumemlab.lessons.activations import (EX_INTERNALS_07, EX_LIMIT_07, EX_OUTPUT_07,
                                               EX_WEIGHTS_07)
    kept = {0: []}
    for i, size in enumerate(EX_INTERNALS_07):
        bound = EX_LIMIT_07 - EX_WEIGHTS_07 - (i + 1) * EX_OUTPUT_07 - EX_OUTPUT_07 - size
        kept = {k: plan for k, plan in kept.items() if k <= bound}
        grown = {k: plan + [i] for k, plan in kept.items()}
        grown.update({k + size: plan for k, plan in kept.items()})
        kept = grown
    return kept[max(kept)]


RIGHT["07.ex"] = _layers_to_checkpoint_07


def _block_08():
    # the largest power of two whose waste, simulated, stays under the limit
    from gpumemlab.lessons.paged_kv_cache import WASTE_LIMIT_08, waste_08
    return max(b for b in (1, 2, 4, 8, 16, 32, 64, 128) if waste_08(b) < WASTE_LIMIT_08)


RIGHT["08.ex"] = _block_08


def _tensors_to_free_09():
    # the reasoning: the request (the trace's last entry) needs a 2 MiB-rounded cudaMalloc the
    # driver cannot serve with what it has free, and no free block of its size. Either free a run
    # of neighbours in a large segment until they merge into one, or empty a segment whole: the
    # allocator hands it back before it raises, and the driver then has enough. The cheapest: a
    # small-pool segment whose few live tensors add up to a few KiB
    from gpumemlab.lessons.diagnose_your_run import recording_09
    snap = recording_09()
    last = snap["device_traces"][0][-1]
    need = -(-last["size"] // (2 * MiB)) * 2 * MiB - last["device_free"]
    live = [[b for b in s["blocks"] if b["state"] == "active_allocated"]
            for s in snap["segments"] if s["total_size"] >= need]
    return [b["address"] for b in min(live, key=lambda bs: sum(b["size"] for b in bs))]


RIGHT["09.ex"] = _tensors_to_free_09


def _reserved_14():
    # the loop itself, on a fresh card: what it reserves while the side stream is busy
    from gpumemlab.devices.simulated import SimulatedGPU
    from gpumemlab.lessons.streams import BUFFER_14, STEPS_14, side_stream_loop
    return side_stream_loop(SimulatedGPU("8GiB", alloc_conf=""), STEPS_14, BUFFER_14)[0]


RIGHT["14.ex"] = _reserved_14


def _offload_15():
    # the reasoning: a kept buffer pins the segment it was carved from until every buffer in that
    # segment leaves; run the trainer's step on a card, read which buffers share a segment, and
    # choose the segments that return the most within the copy budget (a knapsack over them)
    from gpumemlab.devices.simulated import SimulatedGPU
    from gpumemlab.kvcache.sleep_mode import TrainerStep
    from gpumemlab.lessons.serving_memory import ACTS_15, BUFFERS_15, OFFLOAD_AT_MOST_15
    card = SimulatedGPU("24GiB", alloc_conf="", record_history=False, record_frames=False)
    kept = TrainerStep(activations=ACTS_15, keep=BUFFERS_15).run(card)
    segments = card.memory_snapshot()
    groups = {}
    for k, t in enumerate(kept):
        i = next(i for i, s in enumerate(segments)
                 if s["address"] <= t.address < s["address"] + s["total_size"])
        groups.setdefault(i, []).append(k)
    plans = {0: (0, [])}
    for i, members in groups.items():
        cost = sum(BUFFERS_15[k] for k in members)
        for spent, (gain, chosen) in list(plans.items()):
            total = gain + segments[i]["total_size"]
            if spent + cost <= OFFLOAD_AT_MOST_15 and plans.get(spent + cost, (-1,))[0] < total:
                plans[spent + cost] = (total, chosen + members)
    return sorted(max(plans.values())[1])


RIGHT["15.ex"] = _offload_15


def _cheapest_levers_16():
    # the planner at each count of checkpointed blocks, fewest first (each block's forward is
    # the extra cost; bf16 costs none), in either precision: the first combination that fits
    from gpumemlab.lessons.will_it_fit import DIMS_16, PRECISIONS_16, plan_16
    return next({"precision": p, "checkpoint": k} for k in range(DIMS_16["layers"] + 1)
                for p in PRECISIONS_16 if plan_16(p, k).fits)


RIGHT["16.ex"] = _cheapest_levers_16


def _offloaded_layers_17():
    # the reasoning: every offloaded activation stays pinned until backward; one at most the
    # threshold pins the next power of two, one above it its exact size. Offload the set that
    # moves the most activation bytes within the host, a knapsack over the pinned blocks
    from gpumemlab.lessons.memory_beyond_the_gpu import EX_ACTS_17, EX_HOST_17, THRESHOLD_17
    blocks = [1 << (a - 1).bit_length() if a <= THRESHOLD_17 * MiB else a for a in EX_ACTS_17]
    plans = {0: (0, [])}
    for i, (size, block) in enumerate(zip(EX_ACTS_17, blocks)):
        for pinned, (moved, chosen) in list(plans.items()):
            if pinned + block <= EX_HOST_17 and plans.get(pinned + block, (-1,))[0] < moved + size:
                plans[pinned + block] = (moved + size, chosen + [i])
    return max(plans.values())[1]


RIGHT["17.ex"] = _offloaded_layers_17
