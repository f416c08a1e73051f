"""Speed of the views: block map of a huge snapshot, player steps on a 200-segment trace,
random slider jumps over a 4,500-event recording of a 4 GiB card.

    python benchmarks/bench_viz.py

Targets: drawing 2,000 segments / 100,000 blocks under 2 s; one player step (move one event and
redraw) under 150 ms median on a 200-segment snapshot; a random slider jump over a 4,500-event
recording of a 4 GiB card under 150 ms median (a jump that meets a block-map layout not among the
recent ones kept redraws axes and labels, and is printed apart). Prints figures and ratios to
the targets; asserts nothing.
"""
from __future__ import annotations

import io
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("MPLBACKEND", "Agg")

MiB, GiB = 1 << 20, 1 << 30


def synthetic_snapshot(n_segments=2000, n_blocks=100_000, seed=0) -> dict:
    """Segments of mixed sizes cut into blocks of random states (no two free blocks adjacent)."""
    rng = random.Random(seed)
    per = n_blocks // n_segments
    segments, address = [], 1 << 40
    for i in range(n_segments):
        small = i % 10 == 0
        size = 2 * MiB if small else rng.choice([20, 64, 128, 512, 1024]) * MiB
        cuts = sorted(rng.sample(range(1, size // 512), per - 1))
        bounds = [0] + [c * 512 for c in cuts] + [size]
        blocks = []
        for j in range(per):
            bsize = bounds[j + 1] - bounds[j]
            state = rng.choice(["active_allocated", "active_allocated", "inactive",
                                "active_pending_free"])
            if blocks and blocks[-1]["state"] == "inactive" and state == "inactive":
                state = "active_allocated"
            requested = 0 if state == "inactive" else max(1, bsize - rng.randrange(512))
            blocks.append({"address": address + bounds[j], "size": bsize,
                           "requested_size": requested, "state": state, "frames": []})
        segments.append({"device": 0, "address": address, "total_size": size, "stream": 0,
                         "segment_type": "small" if small else "large", "is_expandable": False,
                         "segment_pool_id": (0, 0), "frames": [], "blocks": blocks})
        address += size + 2 * MiB
    return {"segments": segments, "device_traces": [[]], "allocator_settings": {}}


def two_hundred_segment_trace(seed=1):
    """A simulated run that grows to about 200 segments, with frees along the way."""
    import gpumemlab as gml
    rng = random.Random(seed)
    gpu = gml.SimulatedGPU("80GiB")
    live = []
    while gpu.memory_snapshot().__len__() < 200:
        if live and rng.random() < 0.35:
            live.pop(rng.randrange(len(live))).free()
        else:
            live.append(gpu.empty(rng.choice([300, 700_000, 3 * MiB, 30 * MiB, 150 * MiB])
                                  + rng.randrange(4096)))
    return gpu, live


def main() -> None:
    import gpumemlab as gml
    import matplotlib.pyplot as plt
    from gpumemlab.viz.history import History

    snap = synthetic_snapshot()
    n_blocks = sum(len(s["blocks"]) for s in snap["segments"])
    totals = []
    for _ in range(3):
        t0 = time.perf_counter()
        fig = gml.show(snap)
        t1 = time.perf_counter()
        fig.savefig(io.BytesIO(), format="png", dpi=100)  # what Jupyter does with it
        t2 = time.perf_counter()
        plt.close(fig)
        totals.append((t1 - t0, t2 - t1))
    build, render = min(totals, key=lambda t: t[0] + t[1])
    print(f"block map: {len(snap['segments'])} segments, {n_blocks} blocks")
    print(f"  build {build * 1e3:.0f} ms + render to PNG {render * 1e3:.0f} ms = "
          f"{(build + render) * 1e3:.0f} ms (best of 3); target 2000 ms, ratio "
          f"{(build + render) / 2.0:.2f}")
    t0 = time.perf_counter()
    gml.fragmentation(snap)
    print(f"  fragmentation metrics: {(time.perf_counter() - t0) * 1e3:.0f} ms")

    gpu, _live = two_hundred_segment_trace()
    t0 = time.perf_counter()
    history = History(gpu)
    t_hist = time.perf_counter() - t0
    n = len(history)
    print(f"trace: {n} events, {len(history.final_segments)} segments at the end; history "
          f"(backward walk + forward pass + checkpoints) {t_hist * 1e3:.0f} ms")
    t0 = time.perf_counter()
    p = gml.player(history, request=200 * MiB)
    print(f"player: built and first frame in {(time.perf_counter() - t0) * 1e3:.0f} ms")
    steps = []
    for k in range(n - 101, n):
        t0 = time.perf_counter()
        p.goto(k)
        steps.append(time.perf_counter() - t0)
    median = statistics.median(steps)
    print(f"  one step forward (apply one event, redraw, PNG, metrics): median "
          f"{median * 1e3:.0f} ms, max {max(steps) * 1e3:.0f} ms over 100 steps; target 150 ms,"
          f" ratio {median / 0.150:.2f}")
    rng = random.Random(2)
    jumps = []
    for _ in range(30):
        k = rng.randrange(n)
        t0 = time.perf_counter()
        p.goto(k)
        jumps.append(time.perf_counter() - t0)
    print(f"  random jumps (from a checkpoint): median {statistics.median(jumps) * 1e3:.0f} ms")
    t0 = time.perf_counter()
    for k in range(n):
        history.goto(k)
    per_event = (time.perf_counter() - t0) / n
    print(f"  state only, no drawing: {per_event * 1e6:.0f} us per event")



def four_gib_trace(events=4500, seed=0):
    """A simulated 4 GiB card's run of about ``events`` events: tensors of small and large sizes
    made and freed at random (at most 40 alive), so that segments appear along the way."""
    import gpumemlab as gml
    rng = random.Random(seed)
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    live = []
    while sum(len(t) for t in gpu.snapshot()["device_traces"]) < events:
        if live and (len(live) > 40 or rng.random() < 0.45):
            live.pop(rng.randrange(len(live))).free()
        else:
            size = rng.choice([rng.randrange(1, MiB), rng.randrange(MiB, 200 * MiB)])
            try:
                live.append(gpu.empty(size))
            except gml.OutOfMemoryError:
                pass
    return gpu.snapshot()


def player_jumps(jumps=200, seed=3):
    """Random slider jumps (the observer path a browser drag takes) over a 4,500-event trace."""
    import gpumemlab as gml
    snap = four_gib_trace()
    t0 = time.perf_counter()
    p = gml.player(snap)
    built = time.perf_counter() - t0
    n = len(p)
    print(f"player on a 4 GiB card's recording: {n} events, {len(snap['segments'])} segments at "
          f"the end; built and first frame in {built * 1e3:.0f} ms")
    rng = random.Random(seed)
    hits, misses = [], []
    for _ in range(jumps):
        k = rng.randrange(n)
        known = len(p._layouts)
        t0 = time.perf_counter()
        p.slider.value = k
        took = time.perf_counter() - t0
        (misses if len(p._layouts) > known else hits).append(took)
    every = hits + misses
    print(f"  {jumps} random slider jumps: median {statistics.median(every) * 1e3:.0f} ms "
          f"(target 150 ms, ratio {statistics.median(every) / 0.150:.2f}); "
          f"{len(hits)} reused a kept layout (median {statistics.median(hits) * 1e3:.0f} ms), "
          f"{len(misses)} drew a new one (median "
          f"{statistics.median(misses) * 1e3 if misses else 0:.0f} ms)")


if __name__ == "__main__":
    main()
    player_jumps()
