"""``memory_summary``: the table ``torch.cuda.memory_summary()`` prints, from ``memory_stats()``.

Same layout as torch/cuda/memory.py: 75-character lines inside ``|...|``, one row group per
statistic with large/small pool rows unless abbreviated, sizes in the unit picked from the
"all" row's value and truncated by integer division.
"""
from __future__ import annotations

_SIZE_PREFIXES = ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB")
_COUNT_PREFIXES = (" ", "K", "M")

_ROWS = (
    ("allocated_bytes", "Allocated memory", "size"),
    ("active_bytes", "Active memory", "size"),
    ("requested_bytes", "Requested memory", "size"),
    ("reserved_bytes", "GPU reserved memory", "size"),
    ("inactive_split_bytes", "Non-releasable memory", "size"),
    ("allocation", "Allocations", "count"),
    ("active", "Active allocs", "count"),
    ("segment", "GPU reserved segments", "count"),
    ("inactive_split", "Non-releasable allocs", "count"),
)


def _format_size(size: int, pref: float) -> str:
    prefix = _SIZE_PREFIXES[0]
    for new_prefix in _SIZE_PREFIXES[1:]:
        if pref < 768 * 1024:
            break
        prefix = new_prefix
        size //= 1024
        pref /= 1024
    return f"{size:6d} {prefix}"


def _format_count(count: int, pref: float) -> str:
    prefix = _COUNT_PREFIXES[0]
    for new_prefix in _COUNT_PREFIXES[1:]:
        if pref < 750 * 1000:
            break
        prefix = new_prefix
        count //= 1000
        pref /= 1000
    return f"{count:7d} {prefix} "


def memory_summary(stats: dict, device: int = 0, abbreviated: bool = False) -> str:
    """The summary table for a flat ``memory_stats()`` dict."""
    lines = ["=" * 75,
             f" {'':16} PyTorch CUDA memory summary, device ID {device:<17d} ",
             "-" * 75,
             f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: "
             f"{stats['num_alloc_retries']:<8d}  ",
             "=" * 75,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name, kind in _ROWS:
        fmt = _format_size if kind == "size" else _format_count
        lines.append("-" * 75)
        subrows = [("all", name)]
        if not abbreviated:
            subrows += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        pref = None
        for sub, label in subrows:
            values = [stats[f"{key}.{sub}.{m}"] for m in ("current", "peak", "allocated", "freed")]
            if pref is None:
                pref = values
            cells = " | ".join(fmt(v, p) for v, p in zip(values, pref))
            lines.append(f" {label:<21} | {cells} ")
    for key, name in (("oversize_allocations", "Oversize allocations"),
                      ("oversize_segments", "Oversize GPU segments")):
        lines.append("-" * 75)
        values = [stats[f"{key}.{m}"] for m in ("current", "peak", "allocated", "freed")]
        cells = " | ".join(_format_count(v, v) for v in values)
        lines.append(f" {name:<21} | {cells} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"
