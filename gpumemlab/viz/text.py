"""Text views for terminals and plain notebooks: an ASCII block map and a readable trace.

``text_blockmap`` draws each segment as a row of characters, one per page, in the spirit of
``torch.cuda.memory._memory_viz.segsum``; ``text_trace`` tells a recorded trace as
pseudo-Python in the spirit of ``_memory_viz.trace`` (``a = seg_0[0:2.00 MiB]``, ``del a``,
``seg_1 = cudaMalloc(20.00 MiB)``). Both return strings and never print.
"""
from __future__ import annotations

from gpumemlab.units import format_size
from gpumemlab.viz.history import History

from .reservations import Reservations
from .metrics import segment_figures
from .blockmap_groups import group_segments
from .source import device_segments, read_source
from .words import count

SMALL_PAGE_BYTES = 65536  # 32 characters for a 2 MiB small-pool segment
LARGE_PAGE_BYTES = 2097152  # segsum-like pages for the large pool, doubled for huge segments
LEGEND = ("legend: # allocated   ~ freed, not yet returned (pending)   . free, cached   "
          "1-9 page partly used (tenths)")


def text_blockmap(source, *, page_bytes=None, width: int = 64, device=None,
                  max_rows: int = 40) -> str:
    """An ASCII block map: one row per segment, one character per page, pools apart.

    Args:
        page_bytes: bytes per character for large-pool segments. By default 2 MiB, doubled
            until the largest segment fits in ``width`` characters. Small-pool segments
            (2 MiB) always use 64 KiB pages.
        width: the widest row of pages when ``page_bytes`` is automatic.
        max_rows: a pool with more segments than this shows equal segments as one row with a
            count (``x12``), the rows holding the most free memory first, and one line summing
            the segments left out (a 1,000-segment recording stays a page, not a scroll).
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 8:
        raise ValueError(f"width must be an int >= 8, got {width!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ValueError(f"max_rows must be an int >= 1, got {max_rows!r}")
    src = read_source(source)
    segments = device_segments(src.snapshot, device)
    large = [(i, s) for i, s in enumerate(segments) if s.get("segment_type") != "small"]
    small = [(i, s) for i, s in enumerate(segments) if s.get("segment_type") == "small"]
    if page_bytes is None:
        page_bytes = LARGE_PAGE_BYTES
        biggest = max((s["total_size"] for _, s in large), default=0)
        while -(-biggest // page_bytes) > width:
            page_bytes *= 2
    elif isinstance(page_bytes, bool) or not isinstance(page_bytes, int) or page_bytes < 512:
        raise ValueError(f"page_bytes must be an int number of bytes >= 512, got {page_bytes!r}")
    lines = []
    if src.name:
        lines.append(src.name)
    for title, group, page in (("large pool", large, page_bytes),
                               ("small pool", small, SMALL_PAGE_BYTES)):
        if not group:
            continue
        lines.append(f"{title}: {count(len(group), 'segment')}, one character = {format_size(page)}")
        if len(group) <= max_rows:
            for index, seg in group:
                lines.append(_segment_row(index, seg, page))
            continue
        number = {id(seg): index for index, seg in group}
        rows, left_out = group_segments([seg for _, seg in group], max_rows)
        for g in rows:
            row = _segment_row(number[id(g["segment"])], g["segment"], page)
            lines.append(row + (f"  x{g['count']} equal segments" if g["count"] > 1 else ""))
        if left_out:
            lines.append(f"  ... {left_out}")
    figures = segment_figures(segments, src.rules)
    lines.append(
        f"{count(len(segments), 'segment')}: reserved {format_size(figures['reserved_bytes'])}, "
        f"allocated {format_size(figures['allocated_bytes'])}, free "
        f"{format_size(figures['free_bytes'])} in {count(figures['free_blocks'], 'block')} "
        f"(largest "
        f"{format_size(figures['largest_free_block_bytes'])}, external fragmentation "
        f"{100 * figures['external_fragmentation']:.1f}%)")
    lines.append(LEGEND)
    return "\n".join(lines)


def _segment_row(index: int, seg: dict, page: int) -> str:
    size = seg["total_size"]
    pages = max(1, -(-size // page))
    used = [0] * pages  # bytes allocated or pending in each page
    pending = [0] * pages
    allocated = free = largest = 0
    offset = 0
    for block in seg["blocks"]:
        bsize, state = block["size"], block["state"]
        if state == "inactive":
            free += bsize
            largest = max(largest, bsize)
        else:
            allocated += bsize if state == "active_allocated" else 0
            start, end = offset, offset + bsize
            p = start // page
            while start < end:
                stop = min(end, (p + 1) * page)
                used[p] += stop - start
                if state != "active_allocated":
                    pending[p] += stop - start
                start, p = stop, p + 1
        offset += bsize
    chars = []
    for p in range(pages):
        length = min(page, size - p * page)
        if used[p] == 0:
            chars.append(".")
        elif used[p] >= length:
            chars.append("~" if pending[p] * 2 > used[p] else "#")
        else:
            chars.append(str(min(9, max(1, 10 * used[p] // length))))
    flags = " expandable" if seg.get("is_expandable") else ""
    flags += f" stream {seg['stream']}" if seg.get("stream", 0) else ""
    return (f"seg {index:>3} {format_size(size):>11} [{''.join(chars)}] "
            f"{format_size(allocated)} allocated, {format_size(free)} free"
            + (f" (largest {format_size(largest)})" if free and largest != free else "")
            + flags)


def _offset(n: int) -> str:
    return "0" if n == 0 else format_size(n)


def text_trace(source, *, device=None, limit=None, snapshots: bool = False) -> str:
    """A recorded trace as pseudo-Python, one line per event (``limit`` caps the lines).

    ``seg_2 = cudaMalloc(20.00 MiB)`` is a new segment; ``b = seg_2[1.00 MiB:3.00 MiB]`` a block
    of 3 MiB at offset 1 MiB into seg_2 (``[0:...]``: at its start); ``del b`` its free. An
    expandable segment is one name for its whole virtual range (``reserve_virtual_range()``), its
    offsets count from the range's start, and ``seg_0.map(40.00 MiB:20.00 MiB)`` /
    ``seg_0.unmap(...)`` map and unmap pages at an offset of it. The
    ``snapshot`` entries a recording gets each time a snapshot is taken (PyTorch records them
    too) say nothing about memory and are left out unless ``snapshots`` is true.
    """
    history = source if isinstance(source, History) else History(source, device=device)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    state = history.initial.copy()
    seg_names = {a: f"seg_{n}" for n, a in enumerate(state.addrs)}  # by segment start
    block_names, counter = {}, [0]
    events, lines = history.events, []
    # one expandable segment = one name, however many mapped runs it is cut into
    reservations = Reservations(history.source.total_memory)
    for address in list(state.addrs):
        seg = state.segs[address]
        if seg.expandable:
            held = reservations.find(address, seg.stream, seg.pool)
            if held is None:
                reservations.add(address, seg.stream, seg.pool, seg_names[address])
            else:
                seg_names[address] = held[1]

    def seg_name(address):
        seg = state.find(address)
        if seg is None:
            return f"<{address:#x}>"
        if seg.expandable:
            held = reservations.find(address, seg.stream, seg.pool)
            if held is not None:
                return held[1]
        if seg.address not in seg_names:
            seg_names[seg.address] = f"seg_{len(set(seg_names.values()))}"
        return seg_names[seg.address]

    def base_of(address):
        """Where offsets count from: the segment's start, or its expandable reservation's."""
        seg = state.find(address)
        if seg is not None and seg.expandable:
            held = reservations.find(address, seg.stream, seg.pool)
            if held is not None:
                return held[0]
        return seg.address if seg is not None else None

    def new_name():
        n, name = counter[0], ""
        counter[0] += 1
        while True:
            name = chr(ord("a") + n % 26) + name
            n = n // 26 - 1
            if n < 0:
                return name

    skip = False
    for i, e in enumerate(events):
        if limit is not None and len(lines) >= limit:
            lines.append(f"# ... {len(events) - i} more events")
            break
        action, addr, size = e.get("action"), e.get("addr", 0), e.get("size", 0)
        line = None
        if skip:
            skip = False
        elif action == "segment_alloc":
            seg_names[addr] = f"seg_{len(set(seg_names.values()))}"
            line = f"{seg_names[addr]} = cudaMalloc({format_size(size)})"
        elif action == "segment_free":
            line = f"cudaFree({seg_name(addr)})  # {format_size(size)}"
        elif action == "segment_map":
            stream, pool = e.get("stream", 0), history._pool_hint(i)
            held = reservations.find(addr, stream, pool)
            if held is None:
                name = f"seg_{len(set(seg_names.values()))}"
                seg_names[addr] = name
                held = reservations.add(addr, stream, pool, name)
                lines.append(f"{name} = reserve_virtual_range()  # expandable segment: "
                             f"pages are mapped into it as needed")
            line = f"{held[1]}.map({_offset(addr - held[0])}:{format_size(size)})"
        elif action == "segment_unmap":
            base = base_of(addr)
            line = f"{seg_name(addr)}.unmap({_offset(addr - base) if base is not None else '?'}:" \
                   f"{format_size(size)})"
        elif action == "alloc":
            base = base_of(addr)
            block_names[addr] = name = new_name()
            offset = _offset(addr - base) if base is not None else "?"
            line = f"{name} = {seg_name(addr)}[{offset}:{format_size(size)}]"
        elif action == "free_requested":
            name = block_names.get(addr)
            note = ""
            if name is None:
                block_names[addr] = name = new_name()
                note = f"  # {name} = {seg_name(addr)}[...], allocated before the trace"
            nxt = events[i + 1] if i + 1 < len(events) else {}
            if nxt.get("action") == "free_completed" and nxt.get("addr") == addr:
                skip = True
                line = f"del {name}{note}"
            else:
                line = f"del {name}  # pending until other streams finish{note.replace('  #', ';')}"
        elif action == "free_completed":
            line = f"# {block_names.get(addr, hex(addr))} returned to the cache (streams done)"
        elif action == "oom":
            free_text = format_size(e["device_free"]) if "device_free" in e else "unknown"
            line = (f"raise OutOfMemoryError  # tried {format_size(size)}, "
                    f"{free_text} free on the device")
        elif action == "snapshot":
            line = "# snapshot" if snapshots else None
        else:
            line = f"# {action} {format_size(size)} at {addr:#x}"
        if line is not None:
            lines.append(line)
        history.apply(state, i)
    return "\n".join(lines)
