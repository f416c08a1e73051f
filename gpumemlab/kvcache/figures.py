"""Figures for the paged-KV-cache lesson: vLLM's Fig. 2, 13, 15 and 18b, redrawn from our runs.

Each function returns a matplotlib Figure (nothing is shown or printed); the paper's values, where
it gives them, are drawn as black markers beside our bars.
"""
from __future__ import annotations

from gpumemlab.viz.palette import CATEGORIES, OKABE_ITO

from . import paper
from .strategies import LABELS

# the kit's palette (gpumemlab.viz.palette): "reserved" is the colour it has in every figure
_COLORS = {"token_states": OKABE_ITO["bluish_green"], "reserved": CATEGORIES["reserved"],
           "internal_fragmentation": OKABE_ITO["vermillion"],
           "external_fragmentation": OKABE_ITO["reddish_purple"], "unused": "#BBBBBB"}
_NAMES = {"token_states": "token states", "reserved": "reserved",
          "internal_fragmentation": "internal frag.", "external_fragmentation": "external frag.",
          "unused": "unused (others)"}


def _new_figure(figsize):
    from matplotlib.figure import Figure
    return Figure(figsize=figsize, layout="constrained")


def draw_breakdown(ax, results: dict, workload: str) -> None:
    """Stacked bars: share of KV memory per category and strategy; x marks the paper's token share."""
    rows = [(s, r) for (w, s), r in results.items() if w == workload]
    bottoms = [0.0] * len(rows)
    for cat, color in _COLORS.items():
        values = [100 * r.shares[cat] for _, r in rows]
        ax.bar(range(len(rows)), values, bottom=bottoms, color=color, label=_NAMES[cat])
        bottoms = [b + v for b, v in zip(bottoms, values)]
    for i, (s, _) in enumerate(rows):
        ref = paper.FIG2_BREAKDOWN.get(s)
        if ref and workload == "sharegpt":
            ax.plot(i, ref["token_states"], "kx", markersize=9)
    ax.set_xticks(range(len(rows)), [LABELS[s] for s, _ in rows], rotation=20, fontsize=8)
    ax.set_ylabel("% of KV memory")
    ax.set_ylim(0, 122)                 # headroom for the legend above the 100% bars
    ax.set_yticks(range(0, 101, 20))
    ax.set_title(f"Where KV memory goes ({workload}-like); x = paper's token share")
    ax.legend(fontsize=7, loc="upper center", ncol=3)


def draw_batch(ax, results: dict) -> None:
    """Grouped bars: mean concurrent requests per strategy and workload; x marks the paper's Fig. 13."""
    workloads = list(dict.fromkeys(w for w, _ in results))
    strategies = list(dict.fromkeys(s for _, s in results))
    width = 0.8 / max(len(workloads), 1)
    for j, w in enumerate(workloads):
        xs = [i + j * width for i in range(len(strategies))]
        bars = ax.bar(xs, [results[(w, s)].mean_batch_size for s in strategies], width, label=w)
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
        for x, s in zip(xs, strategies):
            ref = paper.FIG13_BATCH.get(w, {}).get(s)
            if ref is not None:
                ax.plot(x, ref, "kx", markersize=8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(strategies))],
                  [LABELS[s] for s in strategies], rotation=20, fontsize=8)
    # linear: bar lengths compare as the batch sizes do (a log axis would shrink the ratios)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    ax.set_ylabel("mean concurrent requests")
    ax.set_title("Batch size sustained; x = paper Fig. 13")
    ax.legend(fontsize=7)


def draw_sharing(ax, sharing: dict) -> None:
    """Lines: memory saved by sharing against width; x marks the paper's Fig. 15."""
    for w, res in sharing.items():
        for mode, row in res.savings.items():
            style = "-" if mode == "beam search" else "--"
            ax.plot(list(row), [100 * v for v in row.values()], style, marker="o", label=f"{w} {mode}")
            for k, v in paper.FIG15_SAVING.get(w, {}).get(mode, {}).items():
                ax.plot(k, v, "kx", markersize=8)
    ax.set_xlabel("samples / beam width")
    ax.set_ylabel("% of KV blocks saved")
    ax.set_title("Sharing with copy-on-write; x = paper Fig. 15")
    ax.legend(fontsize=7)


def draw_sweep(ax, sweep: dict) -> None:
    """Token-state share against block size, per workload (log2 x axis)."""
    workloads = list(dict.fromkeys(w for w, _ in sweep))
    for w in workloads:
        sizes = [b for ww, b in sweep if ww == w]
        ax.plot(sizes, [100 * sweep[(w, b)].token_states for b in sizes], marker="o", label=w)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("% of KV memory holding tokens")
    ax.set_title("Block-size sweep (memory side only)")
    ax.legend(fontsize=7)


def comparison_figure(comparison, workload: str = "sharegpt"):
    """The four panels of a :class:`~gpumemlab.kvcache.comparison.Comparison` in one Figure."""
    fig = _new_figure((12, 8.5))
    axes = fig.subplots(2, 2)
    draw_breakdown(axes[0][0], comparison.results, workload)
    draw_batch(axes[0][1], comparison.results)
    if comparison.sharing:
        draw_sharing(axes[1][0], comparison.sharing)
    else:
        axes[1][0].set_axis_off()
    if comparison.sweep:
        draw_sweep(axes[1][1], comparison.sweep)
    else:
        axes[1][1].set_axis_off()
    fig.suptitle(f"Paged vs contiguous KV memory (seed {comparison.seed})")
    return fig
