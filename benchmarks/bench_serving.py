"""Benchmark of the serving-memory part: prefix-caching simulations and the start-up budget.

Run: python benchmarks/bench_serving.py [--requests 10000]
Prints figures; asserts nothing. Target from issue 23: a 10,000-request simulation with prefix
caching, timed. Each line gives the seconds, the hit rate and the evictions, so that the cost of
the bookkeeping shows beside the caching-off run of the same workload.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bench_prefix(num_requests: int) -> None:
    from gpumemlab.kvcache import prefix_workload, simulate_prefix
    for kind in ("system-prompt", "multi-turn", "unique"):
        t0 = time.perf_counter()
        wl = prefix_workload(kind, num_requests, seed=0)
        made = time.perf_counter() - t0
        print(f"{wl.describe()}  (generated in {made:.2f} s)")
        for policy in ("vllm", "radix", "none"):
            start = time.perf_counter()
            r = simulate_prefix(wl, policy, num_blocks=8192, block_size=16, max_running=64)
            took = time.perf_counter() - start
            print(f"  simulate_prefix({policy!r}): {took:.2f} s, hit rate {100 * r.hit_rate:.1f}%, "
                  f"{r.evicted_tokens:,} tokens evicted, {r.hashed_blocks:,} blocks hashed, "
                  f"{r.steps:,} steps")


def bench_budget() -> None:
    import torch
    from torch import nn

    from gpumemlab.kvcache import ForwardTraces, budget, vllm_capture_sizes
    layer = lambda: nn.Sequential(nn.Linear(4096, 14336), nn.GELU(), nn.Linear(14336, 4096))  # noqa: E731
    model = nn.Sequential(*[layer() for _ in range(2)]).to("meta")
    traces = ForwardTraces(model, lambda n: torch.empty(n, 4096, device="meta"))
    start = time.perf_counter()
    b = budget(model, "llama-3-8b", total_memory="24GiB", capture_sizes=vllm_capture_sizes(512),
               graph_traces=traces, activation_peak=traces(8192), max_model_len=8192)
    print(f"budget(51 capture sizes, traced on the meta device): {time.perf_counter() - start:.2f} s; "
          f"{b!r}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args(argv)
    bench_prefix(args.requests)
    bench_budget()


if __name__ == "__main__":
    main()
