"""Replay speed on a 1,000,000-entry recording, and capture overhead on a CPU training step.

Run: python benchmarks/bench_replay.py [--entries N] [--skip-capture]
Prints figures and ratios; the targets (issue 4) are a 1M-entry replay under 10 s and capture
adding at most 3x to the captured step's wall time.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpumemlab.allocator import DeviceCachingAllocator  # noqa: E402
from gpumemlab.recordings.replay import replay  # noqa: E402

MiB = 1024 * 1024


def make_recording(entries: int, seed: int = 0) -> dict:
    """A seeded run on the model with history on: a mix of small and large tensors."""
    rng = random.Random(seed)
    alloc = DeviceCachingAllocator(80 * 1024 * MiB, record_history=True, record_context=None)
    live = []
    while len(alloc.alloc_buffer) < entries:
        if live and (len(live) > 400 or rng.random() < 0.48):
            alloc.free(live.pop(rng.randrange(len(live))))
        else:
            r = rng.random()
            size = (rng.randint(1, 512 * 1024) if r < 0.6 else
                    rng.randint(MiB, 16 * MiB) if r < 0.95 else rng.randint(16 * MiB, 256 * MiB))
            live.append(alloc.malloc(size))
        if rng.random() < 1e-4:
            alloc.empty_cache()
    snap = alloc.snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][:entries]
    return snap


def bench_capture(repeats: int = 5):
    from gpumemlab.recordings.capture import capture
    from gpumemlab.lessons.capture_demo import tiny_transformer, train_step
    rows = []
    for kw in ({}, {"d_model": 256, "seq_len": 128, "n_layers": 4}):
        model, opt = tiny_transformer(**kw)
        train_step(model, opt)
        plain_times, cap_times = [], []
        for _ in range(repeats):      # interleaved, so load on the machine hits both alike
            t = time.perf_counter()
            train_step(model, opt)
            plain_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            with capture(model, opt):
                train_step(model, opt)
            cap_times.append(time.perf_counter() - t)
        plain, cap = min(plain_times), min(cap_times)
        rows.append((kw or "default", plain, cap))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--skip-capture", action="store_true")
    args = ap.parse_args()

    t = time.perf_counter()
    snap = make_recording(args.entries)
    n = len(snap["device_traces"][0])
    print(f"recording: {n} trace entries generated in {time.perf_counter() - t:.1f} s")

    for conf in (None, "expandable_segments:True", "max_split_size_mb:64"):
        t = time.perf_counter()
        result = replay(snap, alloc_conf=conf)
        wall = time.perf_counter() - t
        print(f"replay {conf or 'as recorded':26s}: {wall:6.2f} s total "
              f"({result.elapsed_s:6.2f} s in the event loop, {n / wall / 1e6:.2f} M entries/s), "
              f"{result.allocations} allocations, mismatches {result.address_mismatches}, "
              f"peak reserved {result.peak_reserved / MiB:.0f} MiB, "
              f"target 10 s -> {wall / 10:.2f} of budget")

    if not args.skip_capture:
        for label, plain, cap in bench_capture():
            print(f"capture {label}: step {plain * 1e3:.1f} ms, captured {cap * 1e3:.1f} ms, "
                  f"overhead x{cap / plain:.2f} (target <= x3)")


if __name__ == "__main__":
    main()
