"""Sweeps and figures for prefix caching: hit rate, prefill tokens saved, evictions and cached
memory against block size and pool size; the CPU tier against its size; the 0 % hit-rate cost.

Every number comes from ``simulate_prefix`` on seeded ``prefix_workload`` streams; the pool is
given in token slots so that a block-size sweep keeps the memory constant.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.units import format_size

from .prefix_sim import simulate_prefix
from .prefix_workloads import prefix_workload

KINDS = ("system-prompt", "few-shot", "multi-turn")


@dataclass(frozen=True)
class SweepRow:
    kind: str
    policy: str
    block_size: int
    pool_tokens: int
    hit_rate: float
    saved_tokens: int
    evicted_tokens: int
    cached_bytes: float


def _row(kind, wl, policy, bs, pool_tokens, **kw) -> SweepRow:
    r = simulate_prefix(wl, policy, num_blocks=pool_tokens // bs, block_size=bs, **kw)
    return SweepRow(kind, policy, bs, pool_tokens, r.hit_rate, r.hit_tokens, r.evicted_tokens,
                    r.mean_cached_bytes)


def prefix_sweep(*, num_requests: int = 1000, seed: int = 0, kinds=KINDS,
                 block_sizes=(1, 4, 16, 64, 256), pool_tokens=(16_384, 65_536, 131_072, 262_144),
                 pool_at: int = 65_536, block_at: int = 16, max_running: int = 32) -> list:
    """Rows for both sweeps: block sizes at ``pool_at`` tokens, pool sizes at ``block_at``."""
    rows = []
    for kind in kinds:
        wl = prefix_workload(kind, num_requests, seed=seed)
        for bs in block_sizes:
            rows.append(_row(kind, wl, "vllm", bs, pool_at, max_running=max_running))
        rows.append(_row(kind, wl, "radix", 1, pool_at, max_running=max_running))
        for tokens in pool_tokens:
            for policy in ("vllm", "radix"):
                bs = block_at if policy == "vllm" else 1
                rows.append(_row(kind, wl, policy, bs, tokens, max_running=max_running))
    return rows


def sweep_table(rows) -> str:
    lines = [f"{'workload':<14}{'policy':<7}{'block':>6}{'pool tokens':>12}{'hit rate':>10}"
             f"{'saved tok':>11}{'evicted tok':>13}{'cached (mean)':>15}"]
    seen = set()
    for r in rows:
        key = (r.kind, r.policy, r.block_size, r.pool_tokens)
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"{r.kind:<14}{r.policy:<7}{r.block_size:>6}{r.pool_tokens:>12,}"
                     f"{100 * r.hit_rate:>9.1f}%{r.saved_tokens:>11,}{r.evicted_tokens:>13,}"
                     f"{format_size(int(r.cached_bytes)):>15}")
    return "\n".join(lines)


def cpu_tier_rows(*, num_requests: int = 2000, seed: int = 0, gpu_blocks: int = 4096,
                  ratios=(0, 0.5, 1, 2, 4, 8), kinds=("system-prompt", "multi-turn"),
                  host_bandwidth: float = 25e9, prefill_tokens_per_s: float = 10_000.0) -> list:
    """Per workload and host size (a multiple of the GPU pool): hits on the GPU and from the host,
    the copy time, and the time saved against recomputing at ``prefill_tokens_per_s``."""
    out = []
    for kind in kinds:
        wl = prefix_workload(kind, num_requests, seed=seed)
        for ratio in ratios:
            r = simulate_prefix(wl, "vllm", num_blocks=gpu_blocks, host_blocks=int(ratio * gpu_blocks),
                                host_bandwidth=host_bandwidth)
            out.append((kind, ratio, r.hit_rate, r.host_hit_rate, r.host_transfer_s,
                        r.host_saving_s(prefill_tokens_per_s)))
    return out


def cpu_tier_table(rows) -> str:
    lines = [f"{'workload':<14}{'host/GPU':>9}{'GPU hits':>10}{'host hits':>11}{'copy s':>9}{'saved s':>10}"]
    for kind, ratio, gpu, host, copy_s, saved in rows:
        lines.append(f"{kind:<14}{ratio:>9g}{100 * gpu:>9.1f}%{100 * host:>10.1f}%{copy_s:>9.2f}{saved:>10.1f}")
    return "\n".join(lines)


def prefix_figure(rows):
    """Hit rate against block size and pool size, evictions and cached memory against pool size."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    kinds = sorted({r.kind for r in rows}, key=list(KINDS).index)
    pool_at = max(set(r.pool_tokens for r in rows), key=[r.pool_tokens for r in rows].count)
    for i, kind in enumerate(kinds):
        color = f"C{i}"
        by_bs = sorted((r for r in rows if r.kind == kind and r.policy == "vllm"
                        and r.pool_tokens == pool_at), key=lambda r: r.block_size)
        bs_seen = {}
        for r in by_bs:
            bs_seen[r.block_size] = r
        axes[0, 0].plot(list(bs_seen), [100 * r.hit_rate for r in bs_seen.values()], "o-",
                        color=color, label=f"{kind}, vLLM blocks")
        radix = [r for r in rows if r.kind == kind and r.policy == "radix" and r.pool_tokens == pool_at]
        if radix:
            axes[0, 0].axhline(100 * radix[0].hit_rate, color=color, ls=":", label=f"{kind}, radix")
        for policy, style in (("vllm", "o-"), ("radix", "s--")):
            pts = sorted({r.pool_tokens: r for r in rows if r.kind == kind and r.policy == policy
                          and (policy == "radix" or r.block_size == 16)}.values(),
                         key=lambda r: r.pool_tokens)
            x = [r.pool_tokens for r in pts]
            label = f"{kind}, " + ("vLLM blocks of 16" if policy == "vllm" else "radix")
            axes[0, 1].plot(x, [100 * r.hit_rate for r in pts], style, color=color, label=label)
            axes[1, 0].plot(x, [r.evicted_tokens for r in pts], style, color=color, label=label)
            axes[1, 1].plot(x, [r.cached_bytes / 2**30 for r in pts], style, color=color,
                            label=label)
    axes[0, 0].set(xscale="log", xlabel="block size (tokens)", ylabel="prompt tokens reused (%)",
                   title=f"hit rate vs block size ({pool_at:,}-token pool)")
    axes[0, 1].set(xscale="log", xlabel="pool size (token slots)", ylabel="prompt tokens reused (%)",
                   title="hit rate vs pool size (vLLM block 16 / radix)")
    axes[1, 0].set(xscale="log", xlabel="pool size (token slots)", ylabel="tokens evicted",
                   title="evictions vs pool size")
    axes[1, 1].set(xscale="log", xlabel="pool size (token slots)", ylabel="GiB (Llama-3-8B KV)",
                   title="memory held by cached, unused blocks (mean)")
    from matplotlib.ticker import NullLocator
    pools = sorted({r.pool_tokens for r in rows})
    for ax in (axes[0, 1], axes[1, 0], axes[1, 1]):
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(pools, [f"{p // 1024}K" for p in pools])
    for ax in axes.flat:          # each panel says which line is which (a panel is read alone)
        ax.legend(fontsize=7)
    fig.tight_layout()
    plt.close(fig)  # returned, so Jupyter shows it once (the inline backend would too)
    return fig
