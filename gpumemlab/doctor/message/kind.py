"""The kind of OOM a pasted message shows, decided from its figures by rules taken in order.

With R the request, T the card's total, F the driver's free memory (c10 reads it after releasing
its cached segments and retrying), A allocated, U reserved but unallocated, and outside = T - F -
reserved (memory this process's allocator does not hold):

1. R > T, or R above what a memory fraction allows (L), or, for MPS, allocated + other + R above
   "max allowed": ``exhaustion`` (no setting makes one allocation bigger than the card fit);
2. F clearly at least R (beyond the printed rounding and a margin for page granularity):
   ``unexplained``: the driver had room after the cache was released, so neither fragmentation nor
   other processes explain the failure: the platform does (see message/remedies.py);
3. U >= R: ``fragmentation``;
4. outside covers the shortfall (outside >= R - F) and is more than a CUDA context
   (:data:`CONTEXT_MAX`): ``outside_pytorch``;
5. F and U known (or A + R above T): ``exhaustion``; otherwise ``unknown``.

A comparison within the printed rounding, or an outside figure the size of a bare context, is
borderline: the decision says so and what would decide it.
"""
from __future__ import annotations

from gpumemlab.units import format_size

__all__ = ["decide", "CONTEXT_MIN", "CONTEXT_MAX", "margin"]

CONTEXT_MIN = 200 << 20      # a CUDA context and library handles: 0.2 GiB ...
CONTEXT_MAX = 1 << 30        # ... to about 1 GiB, depending on the GPU and the libraries loaded


def margin(requested: int) -> int:
    """How much more than the request "free" must be to say clearly that the driver had room:
    page and segment granularity (2 MiB pages, 20 MiB segments) plus a tenth of the request."""
    return max(64 << 20, requested // 10)


def _s(n):
    return format_size(n)


def decide(f: dict, p: dict, msg) -> dict:
    """``f`` maps figure names (requested, total, free, allocated, reserved, unallocated,
    outside, limit, allowed, other_allocations) to bytes or None (not printed or doubtful);
    ``p`` maps them to their rounding. Returns kind, rule, a summary sentence and borderline
    remarks."""
    R, T, F, A = f.get("requested"), f.get("total"), f.get("free"), f.get("allocated")
    U, out = f.get("unallocated"), f.get("outside")
    pr = p.get("requested", 0)
    border = []
    if R is None:
        return _unknown(msg, border)
    if msg.form == "exa":
        return {"kind": "exhaustion", "rule": "request_larger_than_card", "borderline": border,
                "summary": "The request is more than 1 EB, larger than any card: a size "
                           "computation went wrong (a negative or overflowed shape)."}
    if msg.form == "per_allocation_limit":
        lim = msg.per_allocation_limit.bytes
        return {"kind": "unexplained", "rule": "per_allocation_limit", "borderline": border,
                "summary": f"The figures do not explain an OOM: the platform refused one "
                           f"allocation of {_s(R)} because it is larger than the "
                           f"{_s(lim)} a single allocation may be on this GPU and driver "
                           f"(the message says so), whatever memory was free."}
    if T is not None and R - pr > T + p.get("total", 0):
        return {"kind": "exhaustion", "rule": "request_larger_than_card", "borderline": border,
                "summary": f"The {_s(R)} requested is more than the whole card ({_s(T)}): no "
                           f"allocator setting and no amount of freeing makes it fit; this one "
                           f"allocation must get smaller."}
    cap = f.get("allowed") if f.get("allowed") is not None else f.get("limit")
    if msg.form == "mps":
        return _mps(f, p, msg, border)
    if cap is not None:
        used = (A or 0) if msg.allocator == "cudaMallocAsync" else (f.get("reserved") or 0)
        if used + R - pr > cap + p.get("limit", 0) + p.get("allowed", 0):
            return {"kind": "exhaustion", "rule": "over_memory_fraction", "borderline": border,
                    "summary": f"A memory fraction caps this process at {_s(cap)}; it held "
                               f"{_s(used)} and asked for {_s(R)} more, past the cap: raise the "
                               f"fraction or hold less."}
    if F is not None:
        room = F - p.get("free", 0) - R - pr
        if room >= margin(R):
            return {"kind": "unexplained", "rule": "driver_had_room", "borderline": border,
                    "summary": f"The figures do not explain an OOM: the driver reported "
                               f"{_s(F)} free, clearly more than the {_s(R)} requested, after "
                               f"the allocator had already released its cache and retried. "
                               f"Neither fragmentation nor other processes explain that: the "
                               f"platform refused the allocation."}
        if F + p.get("free", 0) >= R:
            border.append(f"the driver reported {_s(F)} free, about the {_s(R)} requested: "
                          f"page granularity, or memory freed by another process between the "
                          f"failure and the report, decides whether the platform or the figures "
                          f"explain it")
    if U is not None:
        pu = p.get("unallocated", 0)
        if abs(U - R) <= pu + pr:
            border.append(f"reserved but unallocated ({_s(U)}) and the request ({_s(R)}) are "
                          f"equal within the printed rounding: a snapshot (the largest free "
                          f"block) decides between fragmentation and exhaustion")
        if U >= R:
            return {"kind": "fragmentation", "rule": "cached_free_holds_request",
                    "borderline": border,
                    "summary": f"PyTorch held {_s(U)} cached but unallocated, at least the "
                               f"{_s(R)} asked for, yet no free piece was big enough: the cached "
                               f"memory is fragmented."}
    if out is not None and F is not None and out + p.get("outside", 0) >= R - F:
        if out - p.get("outside", 0) > CONTEXT_MAX:
            return {"kind": "outside_pytorch", "rule": "outside_covers_shortfall",
                    "borderline": border,
                    "summary": f"{_s(out)} of the card is held outside this process's allocator "
                               f"(other processes, the CUDA context, other libraries), enough to "
                               f"cover the shortfall of {_s(R - F)}: no allocator setting makes "
                               f"the {_s(R)} allocation fit while that memory is held."}
        if out >= CONTEXT_MIN:
            border.append(f"memory outside the allocator ({_s(out)}) would cover the shortfall, "
                          f"but it is no more than a CUDA context and its libraries take "
                          f"(0.2-1 GiB): nvidia-smi's per-process figures decide whether another "
                          f"process holds it")
    if (F is not None and U is not None) or (A is not None and T is not None
                                            and A + R - pr - p.get("allocated", 0) > T):
        return _exhaustion(f, border)
    return _unknown(msg, border)


def _exhaustion(f, border):
    R, F, U = f["requested"], f.get("free"), f.get("unallocated")
    if F is not None and U is not None and F + U >= R:
        border.append(f"the cached free memory ({_s(U)}) and the driver's free memory ({_s(F)}) "
                      f"together would hold the request: only whether the cached part could "
                      f"be joined with new memory (expandable segments) decides it")
        return {"kind": "exhaustion", "rule": "no_piece_big_enough", "borderline": border,
                "summary": f"Neither the cached free memory ({_s(U)}) nor the driver's free "
                           f"memory ({_s(F)}) alone holds the {_s(R)} asked for; together they "
                           f"would, so this is exhaustion on the edge of fragmentation."}
    short = None if F is None or U is None else R - F - U
    tail = (f": the program needs about {_s(short)} more than this card had" if short
            else ": the program's own memory and this request exceed the card")
    return {"kind": "exhaustion", "rule": "program_needs_more", "borderline": border,
            "summary": f"Even as one piece, the free memory is less than the {_s(R)} asked "
                       f"for{tail}.", "shortfall": short}


def _mps(f, p, msg, border):
    R, A, O, M = f["requested"], f.get("allocated"), f.get("other_allocations"), f.get("limit")
    if M is None or A is None:
        return {"kind": "unknown", "rule": "mps_without_limit", "borderline": border,
                "summary": "The MPS allocator printed no limit (PYTORCH_MPS_HIGH_WATERMARK_RATIO "
                           "is 0.0 or the message was cut): Metal itself refused the "
                           "allocation, and the message does not say how much of the Mac's "
                           "memory the rest of the system held."}
    used = A + (O or 0)
    if used + R > M + p.get("limit", 0):
        return {"kind": "exhaustion", "rule": "over_mps_limit", "borderline": border,
                "summary": f"MPS held {_s(A)} (and {_s(O or 0)} in other allocations) and "
                           f"asked for {_s(R)} more, past its limit of {_s(M)} (the high "
                           f"watermark: a ratio of the memory macOS recommends for the GPU)."}
    return {"kind": "unexplained", "rule": "metal_refused_below_limit", "borderline": border,
            "summary": f"The figures do not explain an OOM: {_s(used)} plus the {_s(R)} "
                       f"requested is within MPS's limit of {_s(M)}, so Metal itself refused "
                       f"the allocation: the Mac's unified memory was taken by the rest of the "
                       f"system."}


def _unknown(msg, border):
    if msg.form == "runtime_error":
        why = ("\"CUDA error: out of memory\" comes from the CUDA runtime, not from PyTorch's "
               "allocator: a cudaMalloc elsewhere (a library's workspace, the context, NCCL) "
               "failed, and it prints no figures")
    elif msg.truncated:
        why = msg.truncated
    elif msg.allocator == "cudaMallocAsync" and msg.requested is None:
        why = "the cudaMallocAsync backend's message was cut before its figures"
    elif msg.allocator == "cudaMallocAsync":
        why = ("with cudaMallocAsync the driver's memory pool keeps freed memory it has not yet "
               "released, and the message does not separate that from other processes")
    else:
        why = "the message lacks " + (", ".join(msg.missing) or "the figures a kind needs")
    return {"kind": "unknown", "rule": "too_few_figures", "borderline": border,
            "summary": f"The message says too little to tell the kind of OOM: {why}."}
