"""Diagnose a pasted out-of-memory message: its figures, the kind of OOM, fixes for that kind on
that platform, and what a message cannot tell (which settings were on, how the free memory is
split).

The figures follow each form's own arithmetic (see :mod:`~gpumemlab.doctor.message`): reserved is
printed (1.4-2.0), A + C (1.0-1.3, where "cached" C was reserved minus allocated) or A + U (2.1+
and XPU, A including CUDA-graph private pools there); reserved but unallocated is U, C or
reserved - A; memory outside PyTorch is total - free - reserved (one meaning everywhere), and this
process's own part of it P - reserved when the message has the "this process has P" line.
Doubtful figures (:mod:`~gpumemlab.doctor.message.sanity`) are left out of the figures and the
decision (:mod:`~gpumemlab.doctor.message.kind`); the platform
(:mod:`~gpumemlab.doctor.message.platform`) picks the fixes (:mod:`~gpumemlab.doctor.message.remedies`).
"""
from __future__ import annotations

from gpumemlab.units import format_size

from ..diagnosis import Diagnosis
from . import NotAnOOMMessage, OOMMessage, parse_message
from .remedies import fixes as fit_fixes
from .kind import CONTEXT_FLOOR, decide, split_processes
from .foreign import identify
from .foreign_figures import read as read_foreign_figures
from .host_path import diagnose_host_path
from .text import clean, squash
from .platform import detect
from .sanity import check

__all__ = ["diagnose_message", "ASK_FOR_A_SNAPSHOT"]

ASK_FOR_A_SNAPSHOT = (
    "record a snapshot of the failing run and give it to the doctor: call "
    "torch.cuda.memory._record_memory_history(max_entries=100000) at the start, and in an "
    "except torch.OutOfMemoryError: block torch.cuda.memory._dump_snapshot('oom.pickle'); then "
    "gpumemlab doctor oom.pickle")


def _b(fig):
    return None if fig is None else fig.bytes


def _p(fig):
    return 0 if fig is None else fig.precision_bytes


def _figures(m: OOMMessage):
    """bytes and rounding of every figure, printed and derived (None where not printed)."""
    f = {k: _b(getattr(m, k)) for k in ("requested", "total", "free", "allocated", "allowed",
                                        "this_process", "limit", "other_allocations")}
    p = {k: _p(getattr(m, k)) for k in f}
    A, pa = f["allocated"], p["allocated"]
    f["reserved"] = f["unallocated"] = None
    if m.reserved is not None:
        f["reserved"], p["reserved"] = m.reserved.bytes, _p(m.reserved)
        if A is not None:
            f["unallocated"], p["unallocated"] = m.reserved.bytes - A, p["reserved"] + pa
    elif m.unallocated is not None:
        f["unallocated"], p["unallocated"] = m.unallocated.bytes, _p(m.unallocated)
        if A is not None:
            f["reserved"], p["reserved"] = A + m.unallocated.bytes, pa + p["unallocated"]
    if m.allocator == "cudaMallocAsync" and A is not None:
        f["reserved"], p["reserved"] = None, 0    # the pool's cached memory is not printed
    f["outside"] = f["non_pytorch"] = None
    if None not in (f["total"], f["free"], f["reserved"]):
        f["outside"] = f["total"] - f["free"] - f["reserved"]
        p["outside"] = p["total"] + p["free"] + p["reserved"]
    if f["this_process"] is not None and f["reserved"] is not None:
        f["non_pytorch"] = f["this_process"] - f["reserved"]
        p["non_pytorch"] = p["this_process"] + p["reserved"]
    for k in ("outside", "non_pytorch"):     # two-decimal figures can dip just below zero
        if f[k] is not None and -p.get(k, 0) <= f[k] < 0:
            f[k] = 0
    return f, p


def diagnose_message(text: str, *, source: str = "message") -> Diagnosis:
    """Parse ``text`` (see :func:`parse_message`) and diagnose the OOM it reports; a text that
    holds another framework's or a serving engine's memory error instead (or only a bare "CUDA
    error: out of memory" beside one) is named (:mod:`~gpumemlab.doctor.message.foreign`)."""
    host = diagnose_host_path(text, source=source)   # pinned host memory (message/host_path.py)
    if host is not None:
        return host
    try:
        m = parse_message(text)
    except NotAnOOMMessage:
        squashed = squash(clean(text))
        other = identify(squashed)
        if other is None:
            raise
        return _foreign(other, source, squashed)
    if m.form == "runtime_error":
        squashed = squash(m.context)
        other = identify(squashed)
        if other is not None:
            return _foreign(other, source, squashed)
    platform = detect(m)
    raw, prec = _figures(m)
    flags, doubtful = check(raw, prec, platform)
    f = {k: (None if k in doubtful else v) for k, v in raw.items()}
    if "total" in doubtful:
        f["outside"] = None
    f["per_allocation_limit"] = platform.allocation_limit(m)
    others, me = split_processes(m, f["reserved"])
    f["others"] = sum(others.values()) or None
    f["other_pids"] = list(others)
    decision = decide(f, prec, m)
    kind = decision["kind"]
    if kind == "unexplained" and decision["rule"] != "per_allocation_limit":
        decision["summary"] += " " + _causes(platform)
    notes = []
    if m.messages_found > 1:
        notes.append(f"{m.messages_found} out-of-memory messages in the text: read the last")
    if m.truncated:
        notes.append(m.truncated + "; the device is 0")
    if m.missing:
        notes.append(f"partial message: read {', '.join(m.read) or 'no figure'}; could not "
                     f"read {', '.join(m.missing)} (left null)")
    # the Process line that is this very process (inside a container) is not another process
    others = f["others"]
    # "outside PyTorch" has one meaning everywhere (docs/DOCTOR.md): total - free - reserved,
    # all the card's memory that this process's caching allocator does not hold
    non_pytorch = f["outside"]
    d = Diagnosis(
        mode="message", source=source, kind=kind, summary=decision["summary"],
        requested_bytes=f["requested"], total_bytes=f["total"], free_bytes=f["free"],
        allocated_bytes=f["allocated"], reserved_bytes=f["reserved"],
        reserved_unallocated_bytes=f["unallocated"], non_pytorch_bytes=non_pytorch,
        other_processes_bytes=others, device=m.device, notes=notes)
    names = {"requested_bytes": "requested", "total_bytes": "total", "free_bytes": "free",
             "allocated_bytes": "allocated", "reserved_bytes": "reserved",
             "reserved_unallocated_bytes": "unallocated",
             "non_pytorch_bytes": "outside"}
    d.precision = {k: prec.get(v, 0) for k, v in names.items()
                   if getattr(d, k) is not None and prec.get(v, 0)}
    d.fixes, left_out = fit_fixes(kind, decision, f, m, platform)
    d.details = {
        "form": m.form, "backend": m.backend, "allocator": m.allocator,
        "exception": m.exception, "hint": m.hint, "message": m.text, "rule": decision["rule"],
        "platform": list(platform.names), "platform_evidence": dict(platform.evidence),
        "settings_on": dict(platform.settings_on), "conf_variable": platform.conf_variable,
        "borderline": decision["borderline"], "doubtful": flags,
        "doubtful_fields": sorted(doubtful), "left_out": left_out,
        "read": list(m.read), "missing": list(m.missing),
        "other_processes": {str(pid): x.bytes for pid, x in m.other_processes.items()},
        "allowed_bytes": f["allowed"], "limit_bytes": f["limit"],
        "other_allocations_bytes": f["other_allocations"],
        "per_allocation_limit_bytes": _b(m.per_allocation_limit) or decision.get("limit_bytes"),
        "private_pools_bytes": _b(m.private_pools), "this_process_bytes": f["this_process"],
        "outside_allocator_bytes": f["outside"],
        "this_process_outside_allocator_bytes": f["non_pytorch"],
        "printed": {k: getattr(m, k).text for k in
                    ("requested", "total", "free", "allocated", "reserved", "unallocated",
                     "allowed", "this_process", "limit", "other_allocations")
                    if getattr(m, k) is not None}}
    d.details["this_process_pid"] = me
    d.evidence = _evidence(m, d, f, platform, me)
    d.cannot_tell = _cannot_tell(m, platform)
    return d


def _causes(platform):
    found = platform.causes
    if found:
        return "Causes that fit this text: " + "; ".join(found) + "; or a driver bug."
    return ("The text names no platform: the usual causes are Windows' WDDM shared memory, WSL2's "
            "memory limit, unified memory on an APU, a per-allocation size limit, or a driver "
            "bug.")


def _fmt(n):
    return "not printed" if n is None else format_size(n)


_FORM_TITLE = {"1.0-1.3": "PyTorch 1.0-1.3 (\"cached\" is reserved minus allocated)",
               "1.4-2.0": "PyTorch 1.4-2.0", "2.1+": "PyTorch 2.1 or later",
               "xpu": "PyTorch's XPU allocator", "ipex": "Intel Extension for PyTorch",
               "per_allocation_limit": "Intel Extension for PyTorch (per-allocation limit)",
               "cudaMallocAsync": "the cudaMallocAsync backend", "mps": "Apple MPS allocator",
               "exa": "PyTorch (request over 1 EB)",
               "first_sentence": "the first sentence of a PyTorch message only",
               "thc": "PyTorch 0.1-0.4 (THC's \"cuda runtime error (2) : out of memory\")",
               "runtime_error": "the CUDA runtime's own error (not PyTorch's allocator)"}


def _foreign(other, source, squashed) -> Diagnosis:
    """The diagnosis of a memory error that is not PyTorch's caching allocator's: one line
    naming it, what its own figures say (:mod:`~gpumemlab.doctor.message.foreign_figures`) and
    the settings that decide it."""
    fig, says = read_foreign_figures(other.framework, squashed)
    summary = f"Not a PyTorch allocator OOM: {other.what}."
    if says:
        summary += " Its figures: " + "; ".join(says) + "."
    summary += " What decides it: " + "; ".join(other.settings) + "."
    return Diagnosis(mode="message", source=source, kind="not_pytorch_allocator", summary=summary,
                     requested_bytes=fig.get("requested_bytes"),
                     total_bytes=fig.get("total_bytes"), free_bytes=fig.get("free_bytes"),
                     device=fig.get("device"),
                     evidence=[f"the text shows {other.framework}: {other.matched!r}"] + says,
                     cannot_tell=["PyTorch's allocator figures: this text is not its message"],
                     details={"framework": other.framework, "form": "not_pytorch_allocator",
                              "what": other.what, "settings": list(other.settings),
                              "matched": other.matched, "figures": fig})


def _evidence(m: OOMMessage, d: Diagnosis, f: dict, platform, me=None):
    out = [f"form: {_FORM_TITLE.get(m.form, m.form)}" + (f" ({m.backend})" if m.backend else "")]
    if platform.names:
        out.append("platform: " + "; ".join(platform.evidence[n] for n in platform.names))
    if m.form == "mps":
        out.extend(_mps_evidence(m, f))
        return out
    where = "" if d.device is None else f" on GPU {d.device}"
    line = [] if d.requested_bytes is None else [
        f"tried to allocate {_fmt(d.requested_bytes)}{where}"]
    if d.total_bytes is not None:
        line.append(f"card total {_fmt(d.total_bytes)}")
    if d.free_bytes is not None:
        line.append(f"the driver had {_fmt(d.free_bytes)} free")
    if line:
        out.append("; ".join(line))
    held = [f"{_fmt(v)} {k}" for k, v in (("allocated", d.allocated_bytes),
                                          ("reserved", d.reserved_bytes),
                                          ("reserved but unallocated",
                                           d.reserved_unallocated_bytes)) if v is not None]
    if held:
        out.append("PyTorch: " + ", ".join(held))
    if f["outside"] is not None:
        out.append(f"outside PyTorch (total - free - reserved: what this process's caching "
                   f"allocator does not hold): {_fmt(f['outside'])}")
    if m.this_process is not None and f["non_pytorch"] is not None:
        out.append(f"this process uses {m.this_process.text} in all: {_fmt(f['non_pytorch'])} "
                   f"of the memory outside PyTorch is its own (CUDA context, libraries; P - "
                   f"reserved)" + ("" if f["outside"] is None else
                                   f", the other {_fmt(max(f['outside'] - f['non_pytorch'], 0))} "
                                   f"is other processes', the desktop's or the driver's"))
        if f["non_pytorch"] > 2 * CONTEXT_FLOOR:
            # a context and its libraries take well under 1.5 GiB: far more is another
            # allocator living in this process
            out.append(f"this process's {_fmt(f['non_pytorch'])} outside PyTorch's allocator is "
                       f"far more than a CUDA context and its libraries take: probably a second "
                       f"allocator in the process (tiny-cuda-nn, cupy, JAX, TensorRT or another "
                       f"library calling cudaMalloc itself)")
    for pid, fig in m.other_processes.items():
        line = f"process {pid} holds {fig.text}"
        if pid == me:
            line += (" (no 'this process' line, and the one Process line that holds at least what "
                     "this process reserved: probably this very process, seen under another pid "
                     "from inside a container)")
        out.append(line)
    if m.allowed is not None:
        out.append(f"a memory fraction was set: PyTorch may reserve at most {m.allowed.text}")
    if f["limit"] is not None and m.allocator == "cudaMallocAsync":
        out.append(f"a memory fraction caps this process at {_fmt(f['limit'])}")
    if m.allocator == "cudaMallocAsync":
        out.append("cudaMallocAsync: the CUDA driver's pool allocates; PyTorch's caching "
                   "allocator and its settings (expandable_segments, max_split_size_mb, "
                   "roundup_power2_divisions, garbage_collection_threshold) are not in use")
    if m.hint:
        out.append(f"PyTorch's hint line suggests {m.hint}; it prints that whatever the settings")
    out.extend(platform.figure_notes(m, f))
    return out


def _mps_evidence(m, f):
    """What each figure of MPSAllocator.mm's message is, and the sum its limit test takes."""
    A, O, M, R = f["allocated"], f["other_allocations"], f["limit"], f["requested"]
    out = [f"MPS allocated {_fmt(A)}: the tensors PyTorch's MPS allocator holds "
           f"(torch.mps.current_allocated_memory())",
           f"other allocations {_fmt(O)}: what Metal's driver holds for this process beyond "
           f"them (the allocator's cached buffers, MPSGraph and other Metal objects; "
           f"torch.mps.driver_allocated_memory() minus the line above)"]
    pool = {"private": "the private pool (GPU-only buffers)",
            "shared": "the shared pool (buffers the CPU also sees)"}.get(m.pool, "")
    out.append(f"tried to allocate {_fmt(R)}" + (f" from {pool}" if pool else ""))
    if M is not None:
        out.append(f"max allowed {_fmt(M)}: the high watermark, PYTORCH_MPS_HIGH_WATERMARK_RATIO "
                   f"(1.7 by default) times the GPU's recommended working set (Metal's "
                   f"recommendedMaxWorkingSetSize; {_fmt(round(M / 1.7))} if the ratio is the "
                   f"default): one limit, not two")
        if None not in (A, R):
            used = A + (O or 0) + R
            gap = used - M
            out.append(f"the allocator refuses when allocated + other + the request passes it: "
                       f"{_fmt(A)} + {_fmt(O or 0)} + {_fmt(R)} = {_fmt(used)}, "
                       + (f"{_fmt(gap)} over" if gap > 0 else f"{_fmt(-gap)} under"
                          if gap < 0 else "exactly at") + " the limit")
    else:
        out.append("no max allowed printed: the ratio is 0.0 (no limit) or the message was cut")
    return out


def _cannot_tell(m, platform):
    if m.allocator == "mps":
        return ["how much of the Mac's unified memory the rest of the system held",
                "which tensors hold the MPS memory: torch.mps.current_allocated_memory() and "
                "torch.mps.driver_allocated_memory() at the failing step show the totals"]
    mod = platform.module
    out = []
    if m.allocator == "native":
        line = ("which allocator settings were on (expandable_segments, max_split_size_mb, "
                "garbage_collection_threshold, roundup_power2_divisions): the message prints "
                "none of them")
        if platform.hint_names_settings:
            line += (", and its hint suggests expandable_segments even when it is already on "
                     "(pytorch/pytorch#173049)")
        out.append(line)
        out.append("how the cached free memory is split (the largest free block) and which live "
                   "tensors pin the gaps")
        out.append("the tensor's own size: 'Tried to allocate' prints the allocation c10 "
                   "attempted, the rounded request or a whole 2 MiB / 20 MiB segment for small "
                   "ones")
    out.append("whether a fix verified on this one allocation would carry the rest of the run")
    if m.allowed is None and m.allocator == "native":
        out.append(f"whether a memory fraction ({mod}.set_per_process_memory_fraction) capped "
                   f"PyTorch below the card: not printed unless set (then 'X allowed;' appears)")
    out.append("figures beyond the two printed decimals")
    if m.allocator in ("native", "ipex"):
        out.append("to see all of this: " + (ASK_FOR_A_SNAPSHOT if mod == "torch.cuda" else
                                             ASK_FOR_A_SNAPSHOT.replace("torch.cuda.", mod + ".")
                                             + f" ({mod}.memory._record_memory_history is in "
                                               f"recent releases only)"))
    elif m.allocator == "cudaMallocAsync":
        out.append("memory snapshots (_record_memory_history) record only the native caching "
                   "allocator: to get one, run without backend:cudaMallocAsync")
    return out
