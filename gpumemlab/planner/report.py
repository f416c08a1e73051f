"""A ``Plan`` as text (the tables a person reads) and as JSON-ready data (``--json``)."""
from __future__ import annotations

from dataclasses import asdict

from gpumemlab.units import format_size

__all__ = ["plan_text", "plan_dict"]


def _size(n):
    return "-" if n is None else format_size(n)


def plan_dict(p) -> dict:
    cats = {k: v for k, v in p.by_category.items() if k != "index"}
    return {
        "traced_on": p.label, "config": p.config.label(), "params": p.params,
        "total_memory_bytes": p.total_memory_bytes, "context_bytes": p.context_bytes,
        "alloc_conf": p.alloc_conf, "peak_allocated_bytes": p.peak_allocated_bytes,
        "peak_reserved_bytes": p.peak_reserved_bytes, "fits": p.fits,
        "shortfall_bytes": p.shortfall_bytes, "steps": p.steps, "by_category_at_peak": cats,
        "largest_batch": p.largest_batch, "smallest_card_bytes": p.smallest_card_bytes,
        "levers": [asdict(o) for o in p.levers], "settings": [asdict(o) for o in p.settings],
        "crosscheck": p.crosscheck, "not_seen": p.not_seen,
        "offload": p.offload, "host_memory_bytes": p.host_memory_bytes,
        "host_pinned_bytes": p.host_pinned_bytes, "transfer_bytes": p.transfer_bytes,
        "failed": p.failed, "assumptions": p.assumptions,
        "window": "the whole traced run (every step)",
    }


def _failed(p) -> str:
    """Which budgets the plan failed, with by how much."""
    out = []
    if "device" in p.failed:
        out.append(f"device budget, {_size(p.shortfall_bytes)} short")
    if "host" in p.failed:
        out.append(f"host budget, pins {_size(p.host_pinned_bytes)} of "
                   f"{_size(p.host_memory_bytes)}")
    return "; ".join(out)


def plan_text(p) -> str:
    total = p.total_memory_bytes
    lines = [f"Plan: {p.config.label()}, {p.params:,} parameters, traced on {p.label}",
             f"card {_size(total)} - CUDA context {_size(p.context_bytes)} (estimate) = "
             f"{_size(p.capacity_bytes)} for the allocator"
             + (f", PYTORCH_CUDA_ALLOC_CONF={p.alloc_conf}" if p.alloc_conf else ""),
             ""]
    verdict = "FITS" if p.fits else "DOES NOT FIT: " + _failed(p)
    lines.append(f"peak allocated {_size(p.peak_allocated_bytes)}, peak reserved "
                 f"{_size(p.peak_reserved_bytes)}: {verdict}")
    if p.offload or p.host_memory_bytes is not None:
        budget = ("no host budget" if p.host_memory_bytes is None
                  else f"host budget {_size(p.host_memory_bytes)}")
        lines.append(f"pinned host memory {_size(p.host_pinned_bytes)} ({p.offload or 'no'} "
                     f"offload, rounded as CachingHostAllocator rounds), {budget}")
    lines.append("")
    lines.append(f"{'step':<10}{'peak allocated':>16}{'peak reserved':>16}")
    for row in p.steps:
        lines.append(f"{row['step']:<10}{_size(row['peak_allocated_bytes']):>16}"
                     f"{_size(row['peak_reserved_bytes']):>16}")
    lines.append("")
    lines.append("live at the peak, by category:")
    for k, v in p.by_category.items():
        if k != "index" and v:
            lines.append(f"  {k:<16}{_size(v):>12}")
    lines.append("")
    if p.largest_batch is not None:
        lines.append(f"largest batch that fits: {p.largest_batch}"
                     + ("  (not even 1)" if p.largest_batch == 0 else ""))
    lines.append(f"smallest card: {_size(p.smallest_card_bytes)} (context estimate included)")
    if p.levers:
        lines += ["", "levers, each traced and replayed (* = Pareto: nothing is both smaller "
                      "and cheaper):",
                  f"  {'option':<34}{'peak reserved':>14}{'extra FLOPs':>12}{'host pinned':>13}"
                  f"  fits"]
        for o in p.levers:
            fits = "-" if o.fits is None else ("yes" if o.fits else
                                               "no (" + ", ".join(o.failed) + ")")
            mark = "*" if o.pareto else " "
            lines.append(f"{mark} {o.name[:34]:<34}{_size(o.peak_reserved_bytes):>14}"
                         f"{o.extra_compute:>11.0%}{_size(o.host_pinned_bytes):>13}  {fits}  "
                         f"{o.note}")
        if not p.fits:
            helping = [o.name for o in p.levers if o.fits]
            gap = (f"close the {_size(p.shortfall_bytes)} gap" if "device" in p.failed
                   else "fit the host budget")
            lines.append(f"  levers that {gap}: "
                         + (", ".join(helping) if helping else "none of these alone"))
    if p.settings:
        lines += ["", "allocator settings (the doctor's search, same trace):"]
        for o in p.settings:
            fits = "-" if o.fits is None else ("yes" if o.fits else "no")
            lines.append(f"  {o.name[:44]:<44}{_size(o.peak_reserved_bytes):>14}  {fits}")
    if p.crosscheck:
        cc = p.crosscheck
        lines += ["", "cross-checks:",
                  f"  bytes per parameter: {cc['rule']['per_parameter']} B x {cc['params']:,} = "
                  f"{_size(cc['rule']['bytes'])}"]
        if cc.get("playbook"):
            lines.append(f"  Playbook activations L*s*b*h*(34+5as/h): "
                         f"{_size(cc['playbook']['bytes'])} (16-bit)")
        lines += [f"  - {n}" for n in cc["notes"]]
    if p.assumptions and any(o.transfer_bytes for o in [p, *p.levers]):
        lines += ["", "copy bandwidths assumed (nominal, one way; real copies reach less):"]
        lines += [f"  {a}" for a in p.assumptions]
    lines += ["", "not seen by fake tensors:"]
    for n in p.not_seen:
        est = "" if n["estimate_bytes"] is None else f" {_size(n['estimate_bytes'])}"
        lines.append(f"  {n['what']}:{est} ({n['how']})")
    return "\n".join(lines)
