"""One trace entry told in words: what happened, where, and why.

"alloc 2.00 GiB at seg 3 +512.00 MiB: no cached free block large enough, cudaMalloc of a new
2.00 GiB segment". The 'why' follows c10's malloc chain (docs/ALLOCATOR.md#malloc-in-order): a
``segment_alloc`` right before an ``alloc`` at the same address means the cached-block search
failed; an ``alloc`` alone means a cached free block was reused (split if big enough).
"""
from __future__ import annotations

from bisect import bisect_left

from gpumemlab.units import format_size


def plus(offset_bytes: int) -> str:
    """An offset inside a segment: '+512.00 MiB', and '+0' at the start."""
    return f"+{format_size(offset_bytes)}" if offset_bytes else "+0"


def where(state, address: int) -> str:
    """'seg 3 +512.00 MiB': segment number in address order and offset inside it."""
    seg = state.find(address)
    if seg is None:
        return f"address {address:#x} (outside every segment)"
    return f"seg {state.index(seg)} {plus(address - seg.address)}"


def describe_event(history, state, i: int) -> str:
    """Describe event ``i`` of ``history``; ``state`` is the state just before it."""
    events = history.events
    e = events[i]
    action, addr, size = e.get("action"), e.get("addr", 0), e.get("size", 0)
    prev = events[i - 1] if i > 0 else {}
    nxt = events[i + 1] if i + 1 < len(events) else {}
    rules = history.rules
    head = f"event {i}: "
    if action == "alloc":
        seg = state.find(addr)
        if seg is None:
            return head + f"alloc {format_size(size)} at an address outside every segment"
        gap = seg.gap_containing(addr)
        gap_size = (gap[1] - gap[0]) if gap else 0
        block = history._known_size.get(i) or history._infer_size(seg, addr, size)
        rounded = rules.round_size(size)
        text = f"alloc {format_size(size)} at {where(state, addr)}"
        if block != size:
            text += f" (rounded up by {format_size(block - size)} to a {format_size(block)} block)"
        if prev.get("action") == "segment_alloc" and prev.get("addr") == seg.address:
            why = (f"no cached free block large enough, cudaMalloc of a new "
                   f"{format_size(seg.size)} segment")
        elif prev.get("action") == "segment_map" and seg.address <= prev.get("addr", -1) < seg.end:
            why = (f"no cached free block large enough, the expandable segment mapped "
                   f"{format_size(prev.get('size', 0))} more")
        elif gap_size > block:
            why = (f"reused a cached free block of {format_size(gap_size)}, split: "
                   f"{format_size(gap_size - block)} stays cached")
        else:
            why = f"reused a cached free block of {format_size(gap_size)} whole"
            if block > rounded:
                why += f" ({format_size(block - rounded)} too small to split off)"
        return head + f"{text}: {why}"
    if action == "free_requested":
        seg = state.find(addr)
        block = seg.blocks.get(addr) if seg is not None else None
        block_size = format_size(block[0]) if block and block[0] else format_size(size)
        text = f"free of the {block_size} block at {where(state, addr)} requested (del)"
        if nxt.get("action") == "free_completed" and nxt.get("addr") == addr:
            return head + text + "; the next entry returns it to the cache"
        return head + text + ("; it stays pending until work on other streams that used it "
                              "finishes (record_stream)")
    if action == "free_completed":
        seg = state.find(addr)
        if seg is None or addr not in seg.blocks:
            return head + f"free completed at {where(state, addr)}"
        block_size = seg.blocks[addr][0]
        merged = _free_after_merge(seg, addr, block_size)
        text = (f"free completed: the {format_size(block_size)} block at {where(state, addr)} "
                f"returns to the cache")
        if merged > block_size:
            text += f", merged with free neighbours into a {format_size(merged)} free block"
        return head + text
    if action == "segment_alloc":
        return head + (f"cudaMalloc of a new {format_size(size)} segment: no cached free block "
                       f"fits the next request")
    if action == "segment_free":
        j = i
        while j < len(events) and events[j].get("action") == "segment_free":
            j += 1
        why = ("the OOM path released the whole free segments before giving up"
               if j < len(events) and events[j].get("action") == "oom"
               else "empty_cache() (or a cudaMalloc retry) returned a whole free segment to CUDA")
        seg = state.find(addr)
        name = f"seg {state.index(seg)}" if seg is not None else f"{addr:#x}"
        return head + f"cudaFree of {name} ({format_size(size)}): {why}"
    if action == "segment_map":
        return head + (f"expandable segment grew: {format_size(size)} of pages mapped at "
                       f"{format_size(addr)} into the address range")
    if action == "segment_unmap":
        return head + (f"expandable segment shrank: {format_size(size)} of free pages at "
                       f"{where(state, addr)} unmapped and returned to CUDA")
    if action == "oom":
        largest = max((size_ for seg in state.segs.values()
                       for _, size_, _, st in seg.layout() if st == "inactive"), default=0)
        device_free = e.get("device_free")
        free_text = format_size(device_free) if device_free is not None else "unknown"
        return head + (f"OUT OF MEMORY: a request of {format_size(size)} failed; the device had "
                       f"{free_text} free and the largest cached free block was "
                       f"{format_size(largest)}")
    if action == "snapshot":
        return head + "snapshot taken"
    return head + f"{action} {format_size(size)} at {where(state, addr)}"


def _free_after_merge(seg, address: int, size: int) -> int:
    """Size of the free block a freed block becomes once merged with free neighbours."""
    i = bisect_left(seg.starts, address)
    if i:
        prev = seg.starts[i - 1]
        start = prev + seg.blocks[prev][0]
    else:
        start = seg.address
    end = seg.starts[i + 1] if i + 1 < len(seg.starts) else seg.end
    return end - start
