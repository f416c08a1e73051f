"""The simulated GPU side by side with ``torch.empty`` on the CPU, and its memory and pool costs.

Prints every target figure of issues 13 and 37, measured in one run, best of ``--rounds`` rounds:

1. pace: the seeded malloc/free mix of bench_allocator.py (realistic sizes, about 5,000 live),
   run by ``torch.empty(n, dtype=torch.uint8)`` (freed by dropping the tensor) and by
   ``gml.SimulatedGPU`` (``gpu.empty(n)``, freed by dropping the Allocation), the same loop for
   both, the three interleaved round by round so each ratio is of the same run. Targets (issue
   37): defaults (history and frames on) >= 1.0x torch.empty; history and frames off >= 2x.
2. pool: per-event cost of a malloc/free mix on an allocator holding 10,000 and 1,000,000
   unmergeable free blocks of mixed sizes. Target: 1M at most 3x the 10k cost.
3. memory: resident memory growth over 1,000,000 events with default settings. Target <= 200 MiB.
4. snapshot: loading and replaying a 2,000,000-entry snapshot with frames (``gml.replay(path)``)
   against ``python -m torch.cuda._memory_viz stats`` on the same file, each in a fresh process.
   Target <= 0.5x.

Usage: python benchmarks/bench_simulated_gpu.py [--events N] [--rounds R] [--pool-blocks N]
       [--memory-events N] [--snapshot-entries N] [--skip pace,pool,memory,snapshot]
"""
from __future__ import annotations

import argparse
import gc
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpumemlab as gml  # noqa: E402
from bench_allocator import workload  # noqa: E402
from gpumemlab.allocator import DeviceCachingAllocator  # noqa: E402

MiB = 1024 * 1024


def run_events(make, events) -> float:
    """CPU seconds for ``events`` with ``make(n)`` as the allocation; frees drop the object."""
    live = []
    t0 = time.process_time()
    for kind, arg in events:
        if kind == "m":
            live.append(make(arg))
        else:
            live[arg] = live[-1]  # swap-remove: which object goes is still seeded
            live.pop()
    elapsed = time.process_time() - t0
    live.clear()
    return elapsed


def pace(args):
    import torch
    events = workload(args.events)
    makers = {
        "torch.empty": lambda: (lambda n, _e=torch.empty, _u=torch.uint8: _e(n, dtype=_u)),
        "gml defaults": lambda: gml.SimulatedGPU("1024TiB").empty,
        "gml history+frames off": lambda: gml.SimulatedGPU(
            "1024TiB", record_history=False, record_frames=False).empty,
    }
    best = {name: float("inf") for name in makers}
    for _ in range(args.rounds):
        for name, factory in makers.items():
            best[name] = min(best[name], run_events(factory(), events))
    base = len(events) / best["torch.empty"]
    print(f"[pace] {len(events):,} events, best of {args.rounds} rounds (events per CPU second)")
    for name, seconds in best.items():
        rate = len(events) / seconds
        print(f"  {name:24s} {rate:>10,.0f} ev/s  {rate / base:5.2f}x torch.empty")
    d = len(events) / best["gml defaults"] / base
    o = len(events) / best["gml history+frames off"] / base
    print(f"  target defaults >= 1.0x: {d:.2f}x {'met' if d >= 1.0 else 'NOT met'}; "
          f"history+frames off >= 2x: {o:.2f}x {'met' if o >= 2.0 else 'NOT met'}")


def fragmented(n_free: int, seed: int = 1):
    """An allocator whose large pool holds ``n_free`` unmergeable free blocks of mixed sizes:
    requests of 10-42 MiB each get a segment of their own (c10 ``get_allocation_size``), and
    freeing them all leaves ``n_free`` whole free segments, which cannot merge."""
    rng = random.Random(seed)
    alloc = DeviceCachingAllocator(1 << 60, record_history=False)
    blocks = [alloc.malloc(rng.randint(5, 21) * 2 * MiB) for _ in range(n_free)]
    for blk in blocks:
        alloc.free(blk)
    return alloc, rng


def pool(args):
    def per_event(n_free):
        alloc, rng = fragmented(n_free)
        sizes = [rng.randint(10, 84) * MiB // 2 for _ in range(args.pool_events)]
        best = float("inf")
        gc.disable()
        for _ in range(args.rounds):
            t0 = time.process_time()
            for size in sizes:
                alloc.free(alloc.malloc(size))
            best = min(best, time.process_time() - t0)
        gc.enable()
        assert len(alloc.large_blocks) >= n_free
        return best / (2 * len(sizes))

    small = per_event(10_000)
    big = per_event(args.pool_blocks)
    ratio = big / small
    print(f"[pool] malloc/free mix, {args.pool_events:,} pairs: 10,000 free blocks "
          f"{small * 1e6:.2f} us/event, {args.pool_blocks:,} free blocks {big * 1e6:.2f} us/event: "
          f"{ratio:.2f}x; target <= 3x: {'met' if ratio <= 3 else 'NOT met'}")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory(args):
    events = workload(args.memory_events, seed=2)
    gpu = gml.SimulatedGPU("1024TiB")  # imports the device module (and torch, for its errors)
    gc.collect()
    before = _rss()
    run_events(gpu.empty, events)
    gc.collect()
    growth = _rss() - before
    entries = len(gpu.allocator.alloc_buffer)
    print(f"[memory] {len(events):,} events with default settings: {growth / MiB:.0f} MiB "
          f"resident growth ({entries:,} history entries kept); target <= 200 MiB: "
          f"{'met' if growth <= 200 * MiB else 'NOT met'}")


def make_snapshot(path: Path, entries: int, frames_per_entry: int = 4) -> int:
    """A recorded-looking snapshot of about ``entries`` trace entries, each with its own frame
    dicts (as PyTorch writes them), made by the allocator model itself so it replays exactly."""
    rng = random.Random(3)
    sites = [[{"filename": f"/home/user/train/model_{i % 7}.py", "line": 10 + (i * 37 + k) % 400,
               "name": f"layer_{(i + k) % 23}"} for k in range(frames_per_entry)]
             for i in range(64)]
    alloc = DeviceCachingAllocator(80 * 1024 ** 3, record_history=True)
    live = []
    events = workload(entries * 2 // 3 + 1, seed=4)  # ~1.5 entries per event
    for kind, arg in events:
        if kind == "m":
            live.append(alloc.malloc(arg, 0, rng.choice(sites)))
        else:
            blk = live[arg]
            live[arg] = live[-1]
            live.pop()
            alloc.free(blk)
    snap = alloc.snapshot()
    for e in snap["device_traces"][0]:
        e["frames"] = [dict(f) for f in e.get("frames", ())]  # one set of dicts per entry
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
    return len(snap["device_traces"][0])


def _timed(cmd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ,
                   "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0


def snapshot(args):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.pickle"
        n = make_snapshot(path, args.snapshot_entries)
        size = path.stat().st_size
        ours = ("import gpumemlab as gml, sys; r = gml.replay(sys.argv[1]); "
                "assert r.address_mismatches == 0, r")
        t_viz = min(_timed([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(path)])
                    for _ in range(args.snapshot_rounds))
        t_gml = min(_timed([sys.executable, "-c", ours, str(path)])
                    for _ in range(args.snapshot_rounds))
    ratio = t_gml / t_viz
    print(f"[snapshot] {n:,} entries with frames ({size / MiB:.0f} MiB pickle): "
          f"_memory_viz stats {t_viz:.1f} s, gml load+replay {t_gml:.1f} s: {ratio:.2f}x; "
          f"target <= 0.5x: {'met' if ratio <= 0.5 else 'NOT met'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pool-blocks", type=int, default=1_000_000)
    ap.add_argument("--pool-events", type=int, default=20_000)
    ap.add_argument("--memory-events", type=int, default=1_000_000)
    ap.add_argument("--snapshot-entries", type=int, default=2_000_000)
    ap.add_argument("--snapshot-rounds", type=int, default=1)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    for name, part in (("pace", pace), ("pool", pool), ("memory", memory),
                       ("snapshot", snapshot)):
        if name not in skip:
            part(args)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
