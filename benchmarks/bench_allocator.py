"""Allocator throughput: a seeded 1,000,000-event malloc/free workload on one core.

Realistic sizes (mixed small and large: activations of a few KiB to tens of MiB, occasional
hundreds of MiB), about 5,000 live blocks at steady state. Reports events per second with
history recording on (ring buffer of max_entries) and off, and the peak traced memory of the
history. Target (issue 2): >= 100,000 events/s median with history on; aim for 250,000.

Usage: python benchmarks/bench_allocator.py [--events N] [--repeats R] [--max-entries M]
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpumemlab.allocator import DeviceCachingAllocator  # noqa: E402

MiB = 1024 * 1024


def workload(n_events: int, live_target: int = 5000, seed: int = 0):
    """A list of ('m', size) / ('f', index-into-live) events, seeded."""
    rng = random.Random(seed)
    events = []
    live = 0
    while len(events) < n_events:
        # Keep the live count around the target: malloc more often when below it.
        p_malloc = 0.9 if live < live_target * 0.9 else (0.1 if live > live_target * 1.1 else 0.5)
        if live == 0 or rng.random() < p_malloc:
            r = rng.random()
            if r < 0.55:
                size = rng.randint(1, 64 * 1024)  # small: biases, norms, small activations
            elif r < 0.80:
                size = rng.randint(64 * 1024, MiB)
            elif r < 0.97:
                size = rng.randint(MiB, 32 * MiB)  # activations, gradients
            else:
                size = rng.randint(32 * MiB, 256 * MiB)  # big weights / logits
            events.append(("m", size))
            live += 1
        else:
            events.append(("f", rng.randrange(live)))
            live -= 1
    return events


def run(events, record_history: bool, max_entries: int) -> float:
    alloc = DeviceCachingAllocator(1 << 50, record_history=record_history, max_entries=max_entries)
    malloc, free = alloc.malloc, alloc.free
    live = []
    gc.disable()
    c0 = time.process_time()
    t0 = time.perf_counter()
    for kind, arg in events:
        if kind == "m":
            live.append(malloc(arg))
        else:
            # swap-remove keeps the free O(1); which block is freed is still seeded
            blk = live[arg]
            live[arg] = live[-1]
            live.pop()
            free(blk)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    gc.enable()
    return elapsed, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-entries", type=int, default=100_000)
    args = ap.parse_args(argv)
    events = workload(args.events)
    print(f"workload: {len(events):,} events ({sum(1 for e in events if e[0] == 'm'):,} mallocs), "
          f"~5,000 live blocks, seed 0")
    results = {}
    for history in (True, False):
        times = [run(events, history, args.max_entries) for _ in range(args.repeats)]
        rates = [len(events) / wall for wall, _ in times]
        cpu_rates = [len(events) / cpu for _, cpu in times]
        results[history] = statistics.median(rates)
        label = f"history on (max_entries={args.max_entries:,})" if history else "history off"
        print(f"{label:36s} median {statistics.median(rates):>10,.0f} events/s wall   "
              f"min {min(rates):>10,.0f}   max {max(rates):>10,.0f}   "
              f"(per CPU second: median {statistics.median(cpu_rates):,.0f})")
    print(f"ratio history-on / history-off: {results[True] / results[False]:.2f}")
    # Memory stays bounded: the ring buffer holds at most max_entries entries.
    tracemalloc.start()
    run(events[:200_000], True, args.max_entries)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak Python memory for 200,000 events with history on: {peak / MiB:.1f} MiB")
    target = 100_000
    print(f"target >= {target:,} events/s with history on: "
          f"{'met' if results[True] >= target else 'NOT met'}")


if __name__ == "__main__":
    main()
