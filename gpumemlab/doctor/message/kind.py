"""The kind of OOM a pasted message shows, decided from its figures by rules taken in order.

With R the request, T the card's total, F the driver's free memory (c10 reads it after releasing
its cached segments and retrying, so after the failure), A allocated, U reserved but unallocated,
outside = T - F - reserved ("outside PyTorch": what this process's caching allocator does not hold) and "others" the
memory of the ``Process N has M memory in use`` lines that are not this process
(:func:`split_processes`):

1. R > T, or a cap: a memory fraction's "L allowed" (c10 refuses when reserved + R > L), the
   cudaMallocAsync backend's "PyTorch limit", MPS's "max allowed" (allocated + other + R above
   it); a sum within the printed rounding of the cap is the cap too (a tie, not a refusal):
   ``exhaustion``;
1b. no free figure printed (XPU), a platform's per-allocation limit (an Intel GPU's 4 GiB) at or
   under R, and reserved + R + a context inside T: ``unexplained`` (rule ``per_allocation_limit``);
2. F clearly at least R (beyond the printed rounding and a margin for page and segment
   granularity): other processes active => ``outside_pytorch`` (they took the room back or hold
   what the failure needed); none => ``unexplained``, with the margin stated: neither a cap,
   fragmentation nor other processes explain it, the platform does (see message/remedies.py);
3. U >= R: ``fragmentation``;
4. R > F and other processes active, or outside clearly more than a context
   (:func:`context_max`: a quarter of a small card up to 1.5 GiB, a tenth of a big one, or this
   process's measured part plus a desktop), covering the shortfall:
   ``outside_pytorch``;
5. F and U known (or A + R above T): ``exhaustion``; otherwise ``unknown``.

A comparison within the printed rounding, or an outside figure the size of a context, is
borderline: the decision says so and what would decide it. No text carries a negative figure.
"""
from __future__ import annotations

from gpumemlab.units import format_size

__all__ = ["decide", "CONTEXT_MIN", "context_max", "margin", "split_processes"]

CONTEXT_MIN = 200 << 20      # a CUDA context and library handles: 0.2 GiB ...
CONTEXT_FLOOR = 3 << 29      # ... and with a desktop, cuDNN/cuBLAS workspaces: up to ~1.5 GiB


def context_max(total: int | None, own: int | None = None) -> int:
    """The most memory outside PyTorch that a lone process's CUDA context, its libraries and a
    desktop explain on a card of ``total`` bytes.

    A context does not grow with the card (its kernels and handles are the same size), so on a
    small card it is a large share: a quarter of the card, at most 1.5 GiB, and on big cards a
    tenth (bigger cards carry bigger workspaces). When the message measures this process's own
    memory outside its allocator (``own`` = P - reserved, from "this process has P"), that part
    is no guess: what it leaves of the allowance is for the desktop, at least CONTEXT_MIN."""
    bound = max(min(CONTEXT_FLOOR, (total or 0) // 4), (total or 0) // 10, CONTEXT_MIN)
    if own is not None and own >= 0:
        return own + max(CONTEXT_MIN, bound - own)
    return bound


def margin(requested: int) -> int:
    """How much more than the request "free" must be to say clearly that the driver had room:
    page and segment granularity (2 MiB pages, 20 MiB segments) plus a tenth of the request."""
    return max(64 << 20, requested // 10)


def split_processes(msg, reserved: int | None) -> tuple[dict, object]:
    """The ``Process N`` lines that are other processes, and the one that is probably this
    process (or None).

    c10 prints "this process has P" for its own pid and "Process N has M" for every other pid
    NVML lists on the device; inside a container NVML's pids are the host's, so the process itself
    appears as a "Process N" line and no "this process" line is printed. Then at most one line is
    this process: the one holding at least what it reserved and closest to it (or the only
    line when reserved is not printed). "At least" is bounded above by what a CUDA context and
    its libraries may add (:func:`context_max`): a line holding far more than this
    process reserved is another process."""
    procs = {pid: fig.bytes for pid, fig in msg.other_processes.items()}
    if not procs or msg.this_process is not None:
        return procs, None
    if reserved is not None:
        total = msg.total.bytes if getattr(msg, "total", None) is not None else 0
        slack = context_max(total)
        fits = [pid for pid, b in procs.items() if reserved <= b <= reserved + slack]
        me = min(fits, key=lambda pid: procs[pid] - reserved) if fits else None
    else:
        me = next(iter(procs)) if len(procs) == 1 else None
    return {pid: b for pid, b in procs.items() if pid != me}, me


def _s(n):
    return format_size(n)


def _result(kind, rule, summary, border, **more):
    return {"kind": kind, "rule": rule, "summary": summary, "borderline": border, **more}


def decide(f: dict, p: dict, msg) -> dict:
    """``f`` maps figure names (requested, total, free, allocated, reserved, unallocated,
    outside, limit, allowed, other_allocations, others) to bytes or None (not printed or
    doubtful); ``p`` maps them to their rounding. Returns kind, rule, a summary sentence and
    borderline remarks."""
    R, T, F, A = f.get("requested"), f.get("total"), f.get("free"), f.get("allocated")
    U, out, others = f.get("unallocated"), f.get("outside"), f.get("others") or 0
    pr = p.get("requested", 0)
    border = []
    if R is None:
        return _unknown(msg, border)
    if msg.form == "exa":
        return _result("exhaustion", "request_larger_than_card",
                       "The request is more than 1 EB, larger than any card: a size computation "
                       "went wrong (a negative or overflowed shape).", border)
    if msg.form == "per_allocation_limit":
        lim = msg.per_allocation_limit.bytes
        return _result("unexplained", "per_allocation_limit",
                       f"The figures do not explain an OOM: the platform refused one allocation "
                       f"of {_s(R)} because it is larger than the {_s(lim)} a single allocation "
                       f"may be on this GPU and driver (the message says so), whatever memory "
                       f"was free.", border)
    if T is not None and R - pr > T + p.get("total", 0):
        return _result("exhaustion", "request_larger_than_card",
                       f"The {_s(R)} requested is more than the whole card ({_s(T)}): no "
                       f"allocator setting and no amount of freeing makes it fit; this one "
                       f"allocation must get smaller.", border)
    if msg.form == "mps":
        return _mps(f, p, border)
    capped = _cap(f, p, msg, border)
    if capped is not None:
        return capped
    limited = _platform_limit(f, p, border)
    if limited is not None:
        return limited
    if F is not None:
        room = F - p.get("free", 0) - R - pr
        if room >= margin(R):
            if others:
                return _others(f, msg, border, "after the failure the driver reported "
                               f"{_s(F)} free, more than the {_s(R)} asked for: memory is "
                               f"measured when the message is built, and other processes")
            return _result("unexplained", "driver_had_room",
                           f"The figures do not explain an OOM: the driver reported {_s(F)} "
                           f"free, {_s(room)} more than the {_s(R)} requested (beyond the "
                           f"printed rounding and a {_s(margin(R))} allowance for page and "
                           f"segment granularity), after the allocator had already released "
                           f"its cache and retried{_cap_room(f, p)}; no other process is "
                           f"listed. Neither a cap, fragmentation nor other processes explain "
                           f"that: the platform refused the allocation.", border,
                           margin_bytes=room)
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
            return _result("fragmentation", "cached_free_holds_request",
                           f"PyTorch held {_s(U)} cached but unallocated, at least the {_s(R)} "
                           f"asked for, yet no free piece was big enough: the cached memory is "
                           f"fragmented.", border)
    if F is not None and R > F:
        short = R - F
        if others:
            return _others(f, msg, border, f"the driver had {_s(F)} free, {_s(short)} short of "
                           f"the {_s(R)} asked for, while other processes")
        if out is not None and out + p.get("outside", 0) >= short:
            bound = context_max(T, f.get("non_pytorch"))
            if out - p.get("outside", 0) > bound:
                if out <= 2 * bound:
                    border.append(f"{_s(out)} outside PyTorch is within twice what a context "
                                  f"and a desktop take: before PyTorch 2.0 (CUDA modules "
                                  f"loaded eagerly) a context alone could take 0.5-1 GiB; "
                                  f"nvidia-smi's per-process figures decide")
                return _result("outside_pytorch", "outside_covers_shortfall",
                               f"{_s(out)} of the card is held outside PyTorch (not by this "
                               f"process's caching allocator), more than a CUDA context, its "
                               f"libraries and a desktop take ({_s(bound)} at most here), and "
                               f"enough to cover the shortfall of {_s(short)}: no allocator "
                               f"setting makes the {_s(R)} allocation fit while that memory is "
                               f"held.", border)
            if out >= CONTEXT_MIN:
                border.append(f"memory outside PyTorch ({_s(out)}) would cover the "
                              f"shortfall, but it is no more than a CUDA context, its libraries "
                              f"and a desktop take (up to {_s(bound)} here): "
                              f"nvidia-smi's per-process figures decide whether another process "
                              f"holds it")
    if (F is not None and U is not None) or (A is not None and T is not None
                                            and A + R - pr - p.get("allocated", 0) > T):
        return _exhaustion(f, border)
    return _unknown(msg, border)


def _cap(f, p, msg, border):
    """Rule 1 for a memory fraction or a backend limit: the cap decides when reserved (allocated
    for cudaMallocAsync, which prints no reserved figure) plus the request reaches it."""
    cap = f.get("allowed") if f.get("allowed") is not None else f.get("limit")
    if cap is None:
        return None
    name = "allocated" if msg.allocator == "cudaMallocAsync" else "reserved"
    used = f.get(name)
    if used is None:
        return None
    R = f["requested"]
    tol = p.get("requested", 0) + p.get(name, 0) + p.get("allowed", 0) + p.get("limit", 0)
    if used + R + tol < cap:
        return None
    if used + R <= cap:
        border.append(f"{name} plus the request ({_s(used + R)}) equals the {_s(cap)} cap within "
                      f"the printed rounding: the cap is what refused (c10 refuses when they "
                      f"pass it)")
    return _result("exhaustion", "over_memory_fraction",
                   f"A memory fraction caps this process at {_s(cap)}; it held {_s(used)} "
                   f"({name}) and asked for {_s(R)} more, reaching the cap: raise the fraction or "
                   f"hold less. The free memory on the card does not matter while the cap "
                   f"stands.", border)


def _platform_limit(f, p, border):
    """A platform's per-allocation limit (an Intel GPU's 4 GiB) when the message prints no free
    figure: the request at or over it, and this process's reserved memory plus the request plus
    a context well inside the card, so the card had room and the limit is what refused."""
    lim, R, T = f.get("per_allocation_limit"), f["requested"], f.get("total")
    if lim is None or f.get("free") is not None or T is None:
        return None
    L, inclusive = lim
    pr = p.get("requested", 0)
    if not (R > L + pr or (inclusive and R + pr >= L)):
        return None
    held = f.get("reserved")
    if held is None or held + R + context_max(T) > T:
        return None     # the card may have been full too: the kind stays open
    if abs(R - L) <= pr:
        border.append(f"the {_s(R)} requested is the {_s(L)} limit itself within the printed "
                      f"rounding: PyTorch's XPU allocator hands the request to the SYCL runtime, "
                      f"which refuses above the device's max_mem_alloc_size (at or just under "
                      f"4 GiB on these GPUs; clinfo's 'Max memory allocation' shows it)")
    at = "at or over" if inclusive else "over"
    return _result("unexplained", "per_allocation_limit",
                   f"The figures do not explain an OOM: this process held {_s(held)} and the "
                   f"{_s(R)} asked for fits on the {_s(T)} card with room for a context, but one "
                   f"allocation {at} {_s(L)} is refused on this GPU and driver whatever memory "
                   f"is free (the message prints no free figure, so the limit is the "
                   f"explanation that fits).", border, limit_bytes=L)


def _cap_room(f, p):
    cap = f.get("allowed") if f.get("allowed") is not None else f.get("limit")
    used = f.get("reserved")
    if cap is None or used is None:
        return ""
    return (f", and the {_s(cap)} memory-fraction cap leaves {_s(cap - used - f['requested'])} "
            f"above what it reserved plus the request")


def _others(f, msg, border, lead):
    held = f.get("others") or 0
    pids = ", ".join(str(pid) for pid in f.get("other_pids", ()))
    return _result("outside_pytorch", "other_processes_active",
                   f"Other processes hold memory on this GPU ({pids}: {_s(held)} in all). "
                   f"{lead[0].upper() + lead[1:]} hold {_s(held)}: they are the answer, not "
                   f"the allocator or the platform.", border)


def _exhaustion(f, border):
    R, F, U = f["requested"], f.get("free"), f.get("unallocated")
    if F is not None and F >= R:
        return _result("exhaustion", "free_about_request",
                       f"The driver reported {_s(F)} free, about the {_s(R)} asked for (within "
                       f"the allowance for page and segment granularity): the card is full to "
                       f"the edge, and this allocation is where it tipped over.", border)
    if F is not None and U is not None and F + U >= R:
        border.append(f"the cached free memory ({_s(U)}) and the driver's free memory ({_s(F)}) "
                      f"together would hold the request: only whether the cached part could "
                      f"be joined with new memory (expandable segments) decides it")
        return _result("exhaustion", "no_piece_big_enough",
                       f"Neither the cached free memory ({_s(U)}) nor the driver's free memory "
                       f"({_s(F)}) alone holds the {_s(R)} asked for; together they would, so "
                       f"this is exhaustion on the edge of fragmentation.", border)
    short = None if F is None or U is None else R - F - U
    tail = (f": the program needs about {_s(short)} more than this card had" if short
            else ": the program's own memory and this request exceed the card")
    return _result("exhaustion", "program_needs_more",
                   f"Even as one piece, the free memory is less than the {_s(R)} asked for{tail}.",
                   border, shortfall=short)


def _mps(f, p, border):
    R, A, O, M = f["requested"], f.get("allocated"), f.get("other_allocations"), f.get("limit")
    if M is None or A is None:
        return _result("unknown", "mps_without_limit",
                       "The MPS allocator printed no limit (PYTORCH_MPS_HIGH_WATERMARK_RATIO is "
                       "0.0 or the message was cut): Metal itself refused the allocation, and "
                       "the message does not say how much of the Mac's memory the rest of the "
                       "system held.", border)
    used = A + (O or 0)
    tol = (p.get("allocated", 0) + p.get("other_allocations", 0) + p.get("requested", 0)
           + p.get("limit", 0))
    held = f"MPS held {_s(A)} (and {_s(O or 0)} in other allocations) and asked for {_s(R)} more"
    if used + R > M + tol:
        return _result("exhaustion", "over_mps_limit",
                       f"{held}, past its limit of {_s(M)} (the high watermark: a ratio of the "
                       f"memory macOS recommends for the GPU).", border)
    if used + R >= M - tol:
        border.append(f"allocated + other allocations + the request ({_s(used + R)}) equals "
                      f"the {_s(M)} limit within the printed rounding: a tie at the limit, "
                      f"which the allocator refuses once the sum passes it")
        return _result("exhaustion", "at_mps_limit",
                       f"{held}: with the printed rounding that is the limit of {_s(M)} (the "
                       f"high watermark), so the limit refused it, not Metal.", border)
    return _result("unexplained", "metal_refused_below_limit",
                   f"The figures do not explain an OOM: {_s(used)} plus the {_s(R)} requested "
                   f"is {_s(M - used - R)} under MPS's limit of {_s(M)}, beyond the printed "
                   f"rounding, so Metal itself refused the allocation: the Mac's unified memory "
                   f"was taken by the rest of the system.", border, margin_bytes=M - used - R)


def _unknown(msg, border):
    if msg.form == "runtime_error":
        why = ("\"CUDA error: out of memory\" comes from the CUDA runtime, not from PyTorch's "
               "allocator: a cudaMalloc elsewhere (a library's workspace, the context, NCCL) "
               "failed, and it prints no figures")
    elif msg.form == "thc":
        why = ("PyTorch 0.1-0.4 (THC) printed \"cuda runtime error (2) : out of memory\" with no "
               "figures: the request, the card and what the allocator held are not in the text")
    elif msg.truncated:
        why = msg.truncated
    elif msg.allocator == "cudaMallocAsync" and msg.requested is None:
        why = "the cudaMallocAsync backend's message was cut before its figures"
    elif msg.allocator == "cudaMallocAsync":
        why = ("with cudaMallocAsync the driver's memory pool keeps freed memory it has not yet "
               "released, and the message does not separate that from other processes")
    elif msg.form == "xpu" and msg.free is None:
        why = ("PyTorch's XPU message prints no free-memory figure, so whether the driver had "
               "room is not in the text" + (", and the cached free memory does not hold the "
                                            "request" if msg.unallocated is not None else ""))
    else:
        why = "the message lacks " + (", ".join(msg.missing) or "the figures a kind needs")
    return _result("unknown", "too_few_figures",
                   f"The message says too little to tell the kind of OOM: {why}.", border)
