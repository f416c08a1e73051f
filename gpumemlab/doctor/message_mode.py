"""Diagnose a pasted out-of-memory message: its figures, the kind of OOM, fixes ranked for that kind,
and what a message cannot tell (which settings were on, how the free memory is split).

The figures follow the message's own arithmetic (c10 ``DeviceCachingAllocator::malloc``): reserved
is printed in 1.x and is A + U in 2.x (A includes CUDA-graph private pools there); reserved but
unallocated is U, or reserved - A; memory outside PyTorch's allocator is P - reserved when the
message has the "this process has P" line, else total - free - reserved.
"""
from __future__ import annotations

from gpumemlab.units import format_size

from .diagnosis import Diagnosis, Fix
from .message import OOMMessage, parse_message

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


def diagnose_message(text: str, *, source: str = "message") -> Diagnosis:
    """Parse ``text`` (see :func:`parse_message`) and diagnose the OOM it reports."""
    m = parse_message(text)
    requested = _b(m.requested)
    total, free, allocated = _b(m.total), _b(m.free), _b(m.allocated)
    if m.reserved is not None:
        reserved, res_prec = m.reserved.bytes, _p(m.reserved)
    elif m.allocated is not None and m.unallocated is not None:
        reserved, res_prec = m.allocated.bytes + m.unallocated.bytes, _p(m.allocated) + _p(m.unallocated)
    else:
        reserved, res_prec = None, 0
    if m.unallocated is not None:
        unalloc, un_prec = m.unallocated.bytes, _p(m.unallocated)
    elif reserved is not None and allocated is not None:
        unalloc, un_prec = reserved - allocated, res_prec + _p(m.allocated)
    else:
        unalloc, un_prec = None, 0
    outside = outside_prec = None
    if None not in (total, free, reserved):
        outside, outside_prec = total - free - reserved, _p(m.total) + _p(m.free) + res_prec
    if m.this_process is not None and reserved is not None:
        non_pytorch, np_prec = m.this_process.bytes - reserved, _p(m.this_process) + res_prec
    else:
        non_pytorch, np_prec = outside, outside_prec
    others = sum(f.bytes for f in m.other_processes.values()) if m.other_processes else None
    notes = []
    # two-decimal figures can make a difference of them slightly negative: that is rounding
    if outside is not None and -outside_prec <= outside < 0:
        outside = 0
    if non_pytorch is not None and -np_prec <= non_pytorch < 0:
        non_pytorch = 0
    for label, value in (("total - free - reserved", outside), ("this process - reserved",
                                                                 non_pytorch)):
        if value is not None and value < 0:
            notes.append(f"{label} is negative beyond the printed rounding: the figures do not "
                         f"add up (an edited or mixed-up message?)")
    if m.messages_found > 1:
        notes.append(f"{m.messages_found} out-of-memory messages in the text: read the last")
    if m.missing:
        notes.append("partial message: " + ", ".join(m.missing) + " not given (left null)")
    kind = _kind(requested, reserved, unalloc, outside, outside_prec, un_prec, notes)
    d = Diagnosis(
        mode="message", source=source, kind=kind, summary="", requested_bytes=requested,
        total_bytes=total, free_bytes=free, allocated_bytes=allocated, reserved_bytes=reserved,
        reserved_unallocated_bytes=unalloc, non_pytorch_bytes=non_pytorch,
        other_processes_bytes=others, device=m.device, notes=notes)
    d.precision = {k: v for k, v in (("requested_bytes", _p(m.requested)),
                                     ("total_bytes", _p(m.total)), ("free_bytes", _p(m.free)),
                                     ("allocated_bytes", _p(m.allocated)),
                                     ("reserved_bytes", res_prec),
                                     ("reserved_unallocated_bytes", un_prec),
                                     ("non_pytorch_bytes", np_prec or 0)) if v}
    d.details = {"form": m.form, "backend": m.backend, "exception": m.exception,
                 "hint": m.hint, "message": m.text,
                 "other_processes": {str(pid): f.bytes for pid, f in m.other_processes.items()},
                 "allowed_bytes": _b(m.allowed), "private_pools_bytes": _b(m.private_pools),
                 "this_process_bytes": _b(m.this_process),
                 "printed": {k: getattr(m, k).text for k in
                             ("requested", "total", "free", "allocated", "reserved",
                              "unallocated", "allowed", "this_process")
                             if getattr(m, k) is not None}}
    d.evidence = _evidence(m, d, outside)
    d.summary = _summary(m, d, outside)
    d.fixes = _fixes(m, d, outside)
    d.cannot_tell = _cannot_tell(m)
    return d


def _kind(requested, reserved, unalloc, outside, outside_prec, un_prec, notes):
    if outside is not None and reserved is not None and outside > reserved:
        if outside - outside_prec <= reserved:
            notes.append("outside PyTorch vs reserved is within the printed rounding")
        return "outside_pytorch"
    if unalloc is not None and requested is not None:
        if abs(unalloc - requested) <= un_prec:
            notes.append("reserved-but-unallocated vs the request is within the printed rounding")
        return "fragmentation" if unalloc >= requested else "exhaustion"
    return None


def _fmt(n):
    return "?" if n is None else format_size(n)


def _evidence(m: OOMMessage, d: Diagnosis, outside):
    out = [f"form: PyTorch {m.form} message" + (f" ({m.backend})" if m.backend else "")]
    out.append(f"tried to allocate {_fmt(d.requested_bytes)} on GPU "
               f"{'?' if d.device is None else d.device} of {_fmt(d.total_bytes)}; the driver had "
               f"{_fmt(d.free_bytes)} free")
    out.append(f"PyTorch: {_fmt(d.allocated_bytes)} allocated, {_fmt(d.reserved_bytes)} reserved, "
               f"{_fmt(d.reserved_unallocated_bytes)} reserved but unallocated")
    if outside is not None:
        out.append(f"outside PyTorch's allocator (total - free - reserved): {_fmt(outside)}")
    if m.this_process is not None:
        out.append(f"this process uses {m.this_process.text} in all, {_fmt(d.non_pytorch_bytes)} "
                   f"of it outside PyTorch's allocator (CUDA context, libraries)")
    for pid, fig in m.other_processes.items():
        line = f"process {pid} holds {fig.text}"
        if m.this_process is None and d.reserved_bytes is not None and fig.bytes >= d.reserved_bytes:
            line += (" (at least what this process reserved, and no 'this process' line: probably "
                     "this very process, seen under another pid from inside a container)")
        out.append(line)
    if m.allowed is not None:
        out.append(f"a memory fraction was set: PyTorch may reserve at most {m.allowed.text}")
    if m.hint:
        out.append(f"PyTorch's hint line suggests {m.hint}; it prints that whatever the settings")
    return out


def _summary(m, d, outside):
    req = _fmt(d.requested_bytes)
    if d.kind == "outside_pytorch":
        return (f"Memory outside PyTorch ({_fmt(outside)}) is more than PyTorch itself reserved "
                f"({_fmt(d.reserved_bytes)}): other processes or libraries hold the card, so no "
                f"allocator setting will make the {req} allocation fit.")
    if d.kind == "fragmentation":
        return (f"PyTorch held {_fmt(d.reserved_bytes)} of which {_fmt(d.reserved_unallocated_bytes)} "
                f"was cached but unallocated, at least the {req} asked for, yet no free piece was "
                f"big enough: the cached memory is fragmented.")
    if d.kind == "exhaustion":
        short = _shortfall(d)
        if short == 0:
            return (f"The cached free memory ({_fmt(d.reserved_unallocated_bytes)}) is less than "
                    f"the {req} asked for, so by the message rule this is exhaustion; but together "
                    f"with the driver's free memory ({_fmt(d.free_bytes)}) it would hold the "
                    f"request: the part stranded inside PyTorch's segments decides it, which "
                    f"expandable segments can return.")
        return (f"Even as one piece, the cached free memory ({_fmt(d.reserved_unallocated_bytes)}) "
                f"plus the driver's free memory ({_fmt(d.free_bytes)}) is less than the {req} "
                f"asked for: the program needs about {_fmt(short)} more than this card had.")
    return f"The message says too little to tell the kind of OOM ({', '.join(m.missing)} missing)."


def _shortfall(d):
    if None in (d.requested_bytes, d.free_bytes, d.reserved_unallocated_bytes):
        return None
    return max(d.requested_bytes - d.free_bytes - d.reserved_unallocated_bytes, 0)


def _fixes(m, d, outside):
    req = d.requested_bytes or 0
    mib = max(req >> 20, 1)
    split_mb = max(32, 1 << (mib.bit_length() - 1))     # a power of two at or below the request
    expandable = Fix(
        "expandable_segments",
        "the cached free memory is in pieces; with expandable segments each stream's memory is one "
        "segment that grows and shrinks by pages, so freed pages at its end are unmapped and "
        "remapped where the next request needs them instead of staying stranded",
        how="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        code="torch.cuda.memory._set_allocator_settings('expandable_segments:True')",
        alloc_conf="expandable_segments:True")
    max_split = Fix(
        "max_split_size_mb",
        f"cached blocks of at least max_split_size are never split for smaller requests, so big "
        f"free blocks stay whole for big requests like this {_fmt(req)} one (the value is a "
        f"starting point: a snapshot lets the doctor search and verify one)",
        how=f"export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{split_mb}",
        alloc_conf=f"max_split_size_mb:{split_mb}")
    smaller = Fix(
        "reduce_peak_memory",
        f"the program must hold less at its peak: at least {_fmt(_shortfall(d))} less for this "
        f"allocation" if _shortfall(d) else "the program must hold less at its peak",
        how="smaller batch or sequence length; activation checkpointing "
            "(torch.utils.checkpoint); bf16/fp16 autocast; fewer optimizer states (fused/8-bit "
            "optimizers, sharding)")
    bigger = Fix("bigger_card", f"a card with at least {_fmt((d.total_bytes or 0) + (_shortfall(d) or 0))} "
                 f"would have had room for this allocation (and only this one: later ones may "
                 f"need more)" if d.total_bytes else "a card with more memory")
    not_empty_cache = Fix(
        "not_empty_cache",
        "torch.cuda.empty_cache() would not help: before raising, the allocator already released "
        "every cached segment that was wholly free and retried; what stays cached is free space "
        "inside segments that also hold live tensors")
    if d.kind == "outside_pytorch":
        fixes = []
        if m.other_processes:
            pids = ", ".join(str(p) for p in m.other_processes)
            fixes.append(Fix("other_processes", f"processes {pids} hold memory on this GPU",
                             how="nvidia-smi shows them; stop them, or pick a free GPU with "
                                 "CUDA_VISIBLE_DEVICES"))
        fixes.append(Fix(
            "non_pytorch_memory",
            f"{_fmt(outside)} is held outside PyTorch's allocator: the CUDA context, library "
            f"workspaces (cuBLAS, cuDNN, NCCL), or another framework in the same process",
            how="another framework: stop it preallocating (JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false; "
                "TensorFlow: tf.config.experimental.set_memory_growth); CUDA graphs and NCCL buffers "
                "also count"))
        fixes.append(Fix("share_the_card", "cap each user of the card so they fit together",
                         code="torch.cuda.set_per_process_memory_fraction(0.5)"))
        return fixes
    if d.kind == "fragmentation":
        return [expandable, max_split, smaller, not_empty_cache]
    if d.kind == "exhaustion":
        if _shortfall(d) == 0:        # all free memory together would hold it
            return [expandable, smaller, bigger, not_empty_cache]
        return [smaller, bigger, expandable, not_empty_cache]
    return [Fix("snapshot", "a snapshot shows what the message leaves out", how=ASK_FOR_A_SNAPSHOT)]


def _cannot_tell(m):
    out = [
        "which allocator settings were on (expandable_segments, max_split_size_mb, "
        "garbage_collection_threshold, roundup_power2_divisions): the message prints none of them, "
        "and its hint suggests expandable_segments even when it is already on "
        "(pytorch/pytorch#173049)",
        "how the cached free memory is split (the largest free block) and which live tensors pin "
        "the gaps",
        "the tensor's own size: 'Tried to allocate' prints the allocation c10 attempted, the "
        "rounded request or a whole 2 MiB / 20 MiB segment for small ones",
        "whether a fix verified on this one allocation would carry the rest of the run",
    ]
    if m.allowed is None:
        out.append("whether a memory fraction (set_per_process_memory_fraction) capped PyTorch "
                   "below the card: not printed unless set (then 'X allowed;' appears)")
    out.append("figures beyond the two printed decimals")
    out.append("to see all of this: " + ASK_FOR_A_SNAPSHOT)
    return out
