"""What c10 would do with one more request, told from a snapshot: the block map's verdict.

It walks ``DeviceCachingAllocator::malloc`` (c10/cuda/CUDACachingAllocator.cpp) in its order:

1. ``get_free_block``: the best-fit cached free block of the pool and stream (``metrics.find_fit``);
2. ``trigger_free_memory_callbacks`` and a second search: only CUDA IPC registers a callback
   (it frees blocks other processes no longer share), so nothing changes here;
3. ``alloc_block``: refused when reserved memory plus the new segment would pass the memory
   fraction's limit (``set_per_process_memory_fraction``), else cudaMalloc, which fails when the
   driver has less free than the segment (expandable segments map pages instead);
4. ``release_available_cached_blocks``: only with ``max_split_size`` set, it cudaFrees one
   oversize cached block large enough, or the largest oversize ones until enough is freed;
5. ``release_cached_blocks``: cudaFrees every cached segment that holds no live block (and
   unmaps the free pages of expandable segments), then ``alloc_block`` once more;
6. else ``OutOfMemoryError``.

What the driver has free is the one thing a snapshot does not say. It is read, in this order,
from the device itself (``mem_get_info`` and its memory fraction), from the recording's last
trace entry when that is an OOM (c10 records ``device_free`` there), or from the device's
capacity minus reserved memory (as if nothing outside PyTorch held memory); otherwise the
verdict says it is unknown. Not modelled: a CUDA graph capture (which skips step 5), and the
partial pages an expandable segment keeps mapped at the edges of a free block.
"""
from __future__ import annotations

from gpumemlab.allocator.constants import SIZE_MAX
from gpumemlab.units import format_size, parse_size

from .describe import plus


def driver_room(obj, segments, *, total_memory=None, trace=()) -> dict:
    """{"free": bytes or None, "limit": bytes or None, "how": how "free" was learnt,
    "reserved": bytes of every segment of the device}."""
    reserved = sum(s["total_size"] for s in segments)
    return dict(_room(obj, reserved, total_memory, trace), reserved=reserved)


def _room(obj, reserved, total_memory, trace) -> dict:
    limit = None
    fraction = getattr(obj, "get_per_process_memory_fraction", None)
    info = getattr(obj, "mem_get_info", None)
    if callable(info):
        free, total = info()
        if callable(fraction):
            share = fraction()
            limit = int(share * total) if share < 1.0 else None
        return {"free": int(free), "limit": limit, "how": "device"}
    last = trace[-1] if trace else {}
    if last.get("action") == "oom" and isinstance(last.get("device_free"), int):
        return {"free": last["device_free"], "limit": None, "how": "recorded OOM"}
    if isinstance(total_memory, int) and total_memory > 0:
        return {"free": max(total_memory - reserved, 0), "limit": None, "how": "capacity"}
    return {"free": None, "limit": None, "how": "unknown"}


def request_verdict(fit, segments, rules, request, stream, room=None) -> str:
    """One sentence: where the request goes, or what c10 does when no cached block fits."""
    request = parse_size(request, name="request")
    room = room or {"free": None, "limit": None, "how": "unknown"}
    if fit is not None:
        return (f"a {format_size(request)} request fits: best-fit cached block of "
                f"{format_size(fit['block_bytes'])} at seg {fit['segment']} "
                f"{plus(fit['offset_bytes'])} (hatched)")
    rounded = rules.round_size(request)
    pool = rules.pool(rounded)
    mine = [s for s in segments if s.get("segment_type", "large") == pool
            and s.get("stream", 0) == stream]
    free = [b["size"] for s in mine for b in s["blocks"] if b["state"] == "inactive"]
    held = (f"the {pool} pool has {format_size(sum(free))} free but its largest block is "
            f"{format_size(max(free))}" if free else f"the {pool} pool has no free cached block")
    lead = f"a {format_size(request)} request fits no cached free block: {held}"
    if rules.expandable:
        return lead + "; " + _expandable(mine, rules, rounded, pool, segments, room)
    return lead + "; " + _segment(rules, rounded, segments, mine, room)


def _segment(rules, rounded, segments, mine, room) -> str:
    size = rules.allocation_size(rounded)
    reserved = room.get("reserved", sum(s["total_size"] for s in segments))
    first = _refusal(size, reserved, room, f"cudaMalloc({format_size(size)})")
    if first is None:
        return f"c10 cudaMallocs a new {format_size(size)} segment{_free_note(room)}"
    if first == "unknown":
        return (f"c10 would cudaMalloc a new {format_size(size)} segment (it fails if the driver "
                f"has less free: not recorded here)")
    text = first
    released, retried = _release_available(mine, rules, rounded)
    freed = sum(released)
    if released:
        text += (f"; c10 then frees {len(released)} oversize cached block(s) of "
                 f"{format_size(freed)} (max_split_size)")
        if retried and _refusal(size, reserved - freed, _more(room, freed), "") is None:
            return text + f" and its retry gets the {format_size(size)} segment"
    unsplit = [s["total_size"] for s in segments if _unsplit_free(s)]
    count, whole = max(len(unsplit) - len(released), 0), max(sum(unsplit) - freed, 0)
    if whole:
        text += (f"; c10 then frees its unsplit cached segments ({count}, "
                 f"{format_size(whole)})")
    else:
        text += ("; c10 then frees its unsplit cached segments (none here: every segment "
                 "holds a live block)")
    freed += whole
    # the retry after release_cached_blocks comes whatever it freed: the oversize blocks freed
    # by a release_available_cached_blocks that found too few are freed all the same
    if _refusal(size, reserved - freed, _more(room, freed), "") is None:
        return text + f" and its retry gets the {format_size(size)} segment"
    return text + " and raises OutOfMemoryError"


def _expandable(mine, rules, rounded, pool, segments, room) -> str:
    page = rules.page_size(pool)
    tail = max((s["blocks"][-1]["size"] for s in mine if s.get("is_expandable")
                and s["blocks"] and s["blocks"][-1]["state"] == "inactive"), default=0)
    need = -(-max(rounded - tail, 0) // page) * page
    reserved = room.get("reserved", sum(s["total_size"] for s in segments))
    what = f"mapping {format_size(need)} of new {format_size(page)} pages"
    first = _refusal(need, reserved, room, what)
    if first is None:
        return (f"the expandable segment maps {format_size(need)} of new "
                f"{format_size(page)} pages{_free_note(room)}")
    if first == "unknown":
        return (f"the expandable segment would map up to {format_size(need)} of new "
                f"{format_size(page)} pages (it fails if the driver has less free: not "
                f"recorded here)")
    # release_cached_blocks unmaps every free page (the tail too: the request then needs all
    # its pages) and frees the unsplit plain segments
    back = sum(b["size"] // page * page for s in segments if s.get("is_expandable")
               for b in s["blocks"] if b["state"] == "inactive")
    back += sum(s["total_size"] for s in segments if _unsplit_free(s))
    full = -(-rounded // page) * page
    text = first + (f"; c10 then unmaps free pages and frees unsplit cached segments "
                    f"({format_size(back)})")
    if _refusal(full, reserved - back, _more(room, back), "") is None:
        return text + f" and its retry maps {format_size(full)}"
    return text + " and raises OutOfMemoryError"


def _refusal(size, reserved, room, what):
    """None when alloc_block would succeed; else why not (or "unknown")."""
    limit = room.get("limit")
    if limit is not None and reserved + size > limit:
        return (f"{what} is refused: the memory fraction allows {format_size(limit)} and "
                f"{format_size(reserved)} is reserved")
    if room.get("free") is None:
        return "unknown"
    if size <= room["free"]:
        return None
    return f"{what} fails: the driver has {format_size(room['free'])} free"


def _more(room, freed):
    return dict(room, free=None if room.get("free") is None else room["free"] + freed)


def _free_note(room) -> str:
    return "" if room.get("free") is None else \
        f" (the driver has {format_size(room['free'])} free)"


def _unsplit_free(seg) -> bool:
    """A cached segment holding no live block: one free block (c10 ``release_blocks``)."""
    blocks = seg["blocks"]
    return not seg.get("is_expandable") and len(blocks) == 1 and \
        blocks[0]["state"] == "inactive"


def _release_available(mine, rules, rounded):
    """c10 ``release_available_cached_blocks``: (sizes it cudaFrees, whether malloc retries).

    Nothing without ``max_split_size``. Else one oversize cached block of at least
    max(request, max_split_size), or the largest oversize blocks, freed one by one until that
    much is freed; when they do not add up to it, they stay freed but no retry follows.
    """
    limit = rules.max_split_size
    if limit >= SIZE_MAX:
        return [], False
    key = max(rounded, limit)
    sizes = sorted(b["size"] for s in mine if not s.get("is_expandable")
                   for b in s["blocks"] if b["state"] == "inactive")
    fitting = [x for x in sizes if x >= key]
    if fitting:
        return [fitting[0]], True
    released = []
    for x in reversed(sizes):
        if sum(released) >= key or x < limit:
            break
        released.append(x)
    return released, sum(released) >= key
