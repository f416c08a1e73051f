"""Figures of a pasted message that cannot be true as printed, and what the platform is probably doing.

A figure is doubtful when it breaks what c10's arithmetic guarantees on a plain discrete GPU:
allocated, reserved, free or this process's use above the card's total (Windows WDDM spills into
shared system memory and reports dedicated memory as the total; APUs and unified-memory machines
report system memory as free), a value at 2^64 bytes (SIZE_MAX: "no limit" in c10, or an invalid
value from the driver or NVML), or a derived value below zero beyond the printed rounding.
:func:`check` returns one line per doubtful figure and the names of the figures not to be used:
the report never prints them as facts and the kind is decided without them.
"""
from __future__ import annotations

from gpumemlab.units import format_size

__all__ = ["check", "SENTINEL"]

SENTINEL = 1 << 63      # anything this large is SIZE_MAX (2^64 - 1) or a wrapped negative


def _over(a, b, prec):
    return a is not None and b is not None and a - prec > b


def _spill_reason(platform):
    if platform.has("windows"):
        return ("on Windows the driver (WDDM) lets allocations spill into shared system memory "
                "and reports only dedicated memory as the total")
    if platform.has("unified_memory") or platform.has("mps"):
        return ("the device shares system memory (unified memory), and the total is only the "
                "part the driver calls dedicated")
    return ("the device can use memory beyond its reported total (Windows WDDM spilling into "
            "shared system memory, or unified memory on an APU)")


def check(fig: dict, prec: dict, platform) -> tuple[list, set]:
    """``fig`` maps a figure's name to bytes (None when not printed) and ``prec`` to its rounding.

    Returns (lines, doubtful): one sentence per doubtful figure, and the names not to use.
    """
    lines, doubtful = [], set()
    for name, value in fig.items():
        if value is not None and value >= SENTINEL:
            doubtful.add(name)
            if name == "limit":
                lines.append("the PyTorch limit is printed as 2^64 bytes: that is c10's SIZE_MAX, "
                             "meaning no memory fraction was set (not a real size)")
            else:
                lines.append(f"{name} is printed as about 2^64 bytes: that is SIZE_MAX or a "
                             f"wrapped negative from the driver or NVML, not a real size")
    T = None if "total" in doubtful else fig.get("total")
    pt = prec.get("total", 0)
    for name, label in (("allocated", "allocated"), ("reserved", "reserved"),
                        ("this_process", "this process's use"), ("free", "free")):
        v = None if name in doubtful else fig.get(name)
        if T is not None and _over(v, T, prec.get(name, 0) + pt):
            doubtful.add("total")
            lines.append(f"{label} ({format_size(v)}) is more than the card's total "
                         f"({format_size(T)}): {_spill_reason(platform)}; the total is not used "
                         f"as the card's size")
            T = None
    for name, label, why in (
            ("unallocated", "reserved but unallocated (reserved - allocated)",
             "c10 cannot hold less than it has handed out: an edited or mixed-up message"),
            ("outside", "memory outside PyTorch's allocator (total - free - reserved)",
             "the total understates what the device can use, or the figures were read at "
             "different moments"),
            ("non_pytorch", "this process's memory outside the allocator (its use - reserved)",
             "NVML and the allocator disagree (the process's use is read per process by NVML, "
             "which undercounts under some drivers and containers)")):
        v = fig.get(name)
        if v is not None and v < -prec.get(name, 0):
            doubtful.add(name)
            lines.append(f"{label} comes out at -{format_size(-v)}, below zero beyond the "
                         f"printed rounding: {why}; not used")
    return lines, doubtful
