"""The doctor's text and JSON reports of a :class:`~gpumemlab.doctor.diagnosis.Diagnosis`."""
from __future__ import annotations

import json
import textwrap

from gpumemlab.units import format_size

__all__ = ["to_text", "to_json"]

_KIND_TITLE = {"fragmentation": "fragmentation", "exhaustion": "exhaustion (out of memory)",
               "outside_pytorch": "memory held outside PyTorch", "no_oom": "no OOM",
               "unexplained": "unexplained by the figures (the platform refused)",
               "unknown": "unknown (the input says too little)",
               "not_pytorch_allocator": "not a PyTorch allocator OOM",
               None: "unknown (the input says too little)"}
WIDTH = 100
# a kind's title that depends on what raised it: the pinned host path is PyTorch's own allocator,
# only not the GPU's caching one, so "not a PyTorch allocator OOM" would contradict its summary
_FRAMEWORK_TITLE = {"pytorch_pinned_host": "PyTorch's pinned host allocator (host memory), not "
                                           "the GPU's caching allocator"}


def kind_title(d) -> str:
    """The headline's words for ``d.kind``."""
    framework = (d.details or {}).get("framework")
    if d.kind == "not_pytorch_allocator" and framework in _FRAMEWORK_TITLE:
        return _FRAMEWORK_TITLE[framework]
    return _KIND_TITLE.get(d.kind, d.kind)


def _size(n):
    return "-" if n is None else format_size(n)


def _wrap(text, indent="  "):
    return textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def to_text(d) -> str:
    """The report a terminal shows: verdict, figures, evidence, fixes, what the input cannot tell."""
    out = [f"gpumemlab doctor: {d.source} ({d.mode})", f"kind: {kind_title(d)}",
           _wrap(d.summary, "")]
    figures = [("requested", d.requested_bytes), ("card", d.total_bytes),
               ("driver free", d.free_bytes), ("allocated", d.allocated_bytes),
               ("reserved", d.reserved_bytes),
               ("reserved but unallocated", d.reserved_unallocated_bytes),
               ("outside PyTorch", d.non_pytorch_bytes),
               ("other processes", d.other_processes_bytes)]
    det = d.details or {}
    if det.get("form") == "mps":     # MPS prints its own three figures and a limit, no card
        figures = [("requested", d.requested_bytes), ("MPS allocated", d.allocated_bytes),
                   ("other allocations", det.get("other_allocations_bytes")),
                   ("max allowed", det.get("limit_bytes"))]
    shown = [(k, v) for k, v in figures if v is not None]
    if shown:
        out.append("")
        out.append("figures: " + ", ".join(f"{k} {_size(v)}" for k, v in shown)
                   + ("" if d.device is None else f" (GPU {d.device})"))
    if d.evidence:
        out.append("")
        out.append("evidence:")
        out.extend(_wrap(line) if not line.startswith("  ") else _wrap(line.strip(), "    ")
                   for line in d.evidence)
    if d.fixes:
        out.append("")
        out.append("fixes, best first:" if d.mode == "message" else
                   "fixes (each replayed on the recording), best first:")
        rec = d.recommended
        explained = set()
        for f in d.fixes:
            mark = "*" if rec is not None and f is rec else "-"
            line = f"{mark} {f.name}"
            if f.verified:
                line += (": fits" if f.fits else ": still runs out"
                         + (f" at entry {f.first_failing_entry}"
                            if f.first_failing_entry is not None else ""))
                if f.peak_reserved_bytes is not None:
                    line += f", peak reserved {_size(f.peak_reserved_bytes)}"
                if f.headroom_bytes is not None:
                    line += f", headroom {_size(f.headroom_bytes)}"
            out.append(_wrap(line, "  "))
            key = f.name.split(":")[0]
            if key in explained and f is not rec:
                continue              # one why/how per setting: the values differ, not the reason
            explained.add(key)
            if f.why:
                out.append(_wrap("why: " + f.why, "      "))
            if f.how:
                out.append(_wrap("how: " + f.how, "      "))
            if f.code:
                out.append(_wrap("code: " + f.code, "      "))
        if rec is not None:
            out.append(_wrap(f"recommended (*): {rec.name}, the smallest change that a replay "
                             f"shows fits", ""))
        elif d.mode == "snapshot" and d.kind not in ("no_oom", None):
            out.append(_wrap("no setting fits on this card: the run needs less memory or a "
                             "bigger card", ""))
    extra = d.details if d.mode == "message" else {}
    for title, items in (("borderline", extra.get("borderline")),
                         ("doubtful figures (not used)", extra.get("doubtful")),
                         ("not recommended", extra.get("left_out")),
                         ("cannot tell", d.cannot_tell), ("assumes", d.assumptions),
                         ("notes", d.notes)):
        if items:
            out.append("")
            out.append(f"{title}:")
            out.extend(_wrap("- " + item) for item in items)
    return "\n".join(out)


def to_json(d, indent=2) -> str:
    """The JSON report: ``Diagnosis.as_dict()`` (sizes in bytes, null where unknown)."""
    return json.dumps(d.as_dict(), indent=indent, sort_keys=False, default=_plain)


def _plain(obj):
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)
