"""Benchmark of the paged-KV-cache part: simulator speed and paged attention vs SDPA.

Run: python benchmarks/bench_kvcache.py [--requests 10000] [--repeat 5]
Prints figures and ratios; asserts nothing. Targets from issue 5: simulating 10,000 ShareGPT-like
requests with the paged strategy in under 10 s; paged attention on the CPU within 3x of SDPA on
contiguous tensors at batch 8 and 2,048 tokens of context.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Run from a checkout without installing: the package sits next to this folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bench_simulator(num_requests: int) -> None:
    from gpumemlab.kvcache import sharegpt_like, simulate
    t0 = time.perf_counter()
    wl = sharegpt_like(num_requests, seed=0)
    t1 = time.perf_counter()
    for strategy in ("paged", "orca-oracle", "orca-max"):
        start = time.perf_counter()
        r = simulate(strategy, wl, "12GiB")
        took = time.perf_counter() - start
        print(f"simulate({strategy!r}, {num_requests} ShareGPT-like requests): {took:.2f} s "
              f"({r.steps} steps, {r.steps / took:,.0f} steps/s), token states "
              f"{100 * r.token_states:.1f}%, mean batch {r.mean_batch_size:.2f}, "
              f"preemptions {r.preemptions}")
    print(f"  (generating the workload took {t1 - t0:.2f} s)")


def bench_attention(repeat: int, batch: int = 8, context: int = 2048, heads: int = 32,
                    head_dim: int = 128, block_size: int = 16) -> None:
    import torch
    import torch.nn.functional as F

    from gpumemlab.kvcache import PagedKVCache, paged_attention
    torch.manual_seed(0)
    cache = PagedKVCache(batch * context // block_size, block_size, heads, head_dim)
    chunk = 256
    for start in range(0, context, chunk):        # interleaved: each sequence's blocks scattered
        for s in range(batch):
            cache.append(s, torch.randn(chunk, heads, head_dim), torch.randn(chunk, heads, head_dim))
    seqs = list(range(batch))
    q = torch.randn(batch, heads, head_dim)
    k = torch.stack([cache.gather(s)[0] for s in seqs]).transpose(1, 2).contiguous()
    v = torch.stack([cache.gather(s)[1] for s in seqs]).transpose(1, 2).contiguous()
    torch.testing.assert_close(paged_attention(q, cache, seqs),
                               F.scaled_dot_product_attention(q[:, :, None], k, v)[:, :, 0])

    def best_of(fn):
        fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    paged = best_of(lambda: paged_attention(q, cache, seqs))
    sdpa = best_of(lambda: F.scaled_dot_product_attention(q[:, :, None], k, v))
    print(f"decode attention, batch {batch}, {context} tokens, {heads} heads x {head_dim}, fp32, "
          f"block {block_size}, {torch.get_num_threads()} threads:")
    print(f"  paged_attention {1e3 * paged:.1f} ms, SDPA on contiguous K/V {1e3 * sdpa:.1f} ms, "
          f"ratio {paged / sdpa:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bench_simulator(args.requests)
    bench_attention(args.repeat)


if __name__ == "__main__":
    main()
