"""Fragmentation metrics: named figures, each with a one-line definition, read from a snapshot.

``fragmentation(snapshot)`` answers "where did my memory go?" the way a learner should read it:
what the allocator holds (reserved), what tensors use (allocated, requested), what is cached but
scattered (free bytes, the largest free block, external fragmentation), what ``empty_cache`` can
not return (non-releasable, PyTorch's ``inactive_split_bytes``), what rounding costs, and the
largest request that would succeed right now. Like ``torch.cuda.memory._memory_viz.segsum`` it
checks allocated + internal (rounding) free + external free = reserved. The result renders as an
HTML table in Jupyter and as a text table in a terminal.
"""
from __future__ import annotations

from collections.abc import Mapping
from html import escape

from gpumemlab.allocator.constants import K_SMALL_SIZE
from gpumemlab.units import format_size, parse_size

from .size_rules import Rules
from .source import read_source, device_segments

# name -> (kind, one-line definition); the order is the order shown
DEFINITIONS = {
    "reserved_bytes": ("bytes", "memory held by the allocator in segments (memory_reserved())"),
    "allocated_bytes": ("bytes", "memory in allocated blocks, after rounding (memory_allocated())"),
    "requested_bytes": ("bytes", "memory the program asked for, before rounding, in live blocks"),
    "reserved_unallocated_bytes": ("bytes", "reserved minus allocated: cached, not in use"),
    "pending_free_bytes": ("bytes", "freed by the program, waiting for other streams' work"),
    "free_bytes": ("bytes", "memory in free cached blocks, ready for reuse"),
    "free_blocks": ("count", "number of free cached blocks the free memory is split into"),
    "largest_free_block_bytes": ("bytes", "the largest single free cached block"),
    "external_fragmentation": ("ratio", "1 - largest free block / free bytes (0: one free block)"),
    "non_releasable_bytes": ("bytes", "free bytes in split segments: empty_cache cannot return them"),
    "rounding_waste_bytes": ("bytes", "allocated minus requested: lost to 512 B/segment rounding"),
    "utilization": ("ratio", "allocated / reserved: the share of reserved memory in use"),
    "segments": ("count", "number of segments (cudaMalloc'd or mapped ranges)"),
    "largest_request_now_bytes": (
        "bytes", "largest request a cached free block serves now, with no new segment"),
    "largest_request_bytes": (
        "bytes", "largest request that can succeed at all within the device's capacity"),
}


class Fragmentation(Mapping):
    """Named fragmentation figures. ``m["utilization"]``, ``m.as_dict()``, ``m.definition(name)``."""

    def __init__(self, values: dict, *, title: str = "", notes=()):
        unknown = set(values) - set(DEFINITIONS)
        if unknown:
            raise ValueError(f"unknown metric name(s): {sorted(unknown)}")
        self._values = {name: values.get(name) for name in DEFINITIONS}
        self.title = title
        self.notes = tuple(notes)

    def __getitem__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"no metric {name!r}; the metrics are: {', '.join(DEFINITIONS)}") \
                from None

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def as_dict(self) -> dict:
        return dict(self._values)

    @staticmethod
    def definition(name: str) -> str:
        return DEFINITIONS[name][1]

    def formatted(self, name: str) -> str:
        """The value as a learner reads it: sizes in c10's format, ratios in percent."""
        return format_value(DEFINITIONS[name][0], self._values[name])

    def rows(self):
        return [(name, self.formatted(name), DEFINITIONS[name][1]) for name in DEFINITIONS]

    def __str__(self) -> str:
        rows = self.rows()
        w_name = max(len(r[0]) for r in rows)
        w_value = max(len(r[1]) for r in rows)
        lines = [self.title] if self.title else []
        lines += [f"{n:<{w_name}}  {v:>{w_value}}  {d}" for n, v, d in rows]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td><code>{escape(n)}</code></td><td style='text-align:right'>{escape(v)}</td>"
            f"<td style='text-align:left'>{escape(d)}</td></tr>" for n, v, d in self.rows())
        caption = f"<caption>{escape(self.title)}</caption>" if self.title else ""
        notes = "".join(f"<p><small>{escape(n)}</small></p>" for n in self.notes)
        return (f"<table>{caption}<thead><tr><th>metric</th><th>value</th><th>meaning</th>"
                f"</tr></thead><tbody>{body}</tbody></table>{notes}")


def format_value(kind: str, value) -> str:
    if value is None:
        return "unknown"
    if kind == "bytes":
        return format_size(int(value))
    if kind == "ratio":
        return f"{100.0 * value:.1f}%"
    return str(value)


def fragmentation(snapshot, *, total_memory=None, stream: int = 0, device=None) -> Fragmentation:
    """Fragmentation figures for a snapshot dict, segment list, device or replay result.

    Args:
        total_memory: the device's capacity in bytes (or "24GiB"); taken from a device object
            when one is given. Without it ``largest_request_bytes`` is unknown.
        stream: the stream a hypothetical request comes from (cached blocks never cross streams).
        device: which device's segments to read from a multi-device snapshot.
    """
    source = read_source(snapshot, total_memory=total_memory)
    segments = device_segments(source.snapshot, device)
    values = segment_figures(segments, source.rules, stream=stream)
    notes = []
    if source.total_memory is not None:
        values["largest_request_bytes"] = largest_request_at_all(
            segments, source.rules, source.total_memory, values["largest_request_now_bytes"])
        if source.rules.expandable:
            notes.append("under expandable segments largest_request_bytes is estimated "
                         "(pages of 20 MiB, free cached memory assumed unmappable)")
    else:
        notes.append("largest_request_bytes needs the device capacity: pass total_memory=")
    return Fragmentation(values, title=source.name, notes=notes)


def segment_figures(segments, rules: Rules, *, stream: int = 0) -> dict:
    """Every figure that needs only the segments (one pass over the blocks)."""
    reserved = allocated = requested = pending = free = waste = non_releasable = 0
    free_blocks = largest_free = 0
    best = {"small": 0, "large": 0}  # largest free block per pool on ``stream``
    for seg in segments:
        reserved += seg["total_size"]
        pool = seg.get("segment_type", "large")
        split = len(seg["blocks"]) > 1 and not seg.get("is_expandable", False)
        for block in seg["blocks"]:
            size, state = block["size"], block["state"]
            if state == "active_allocated":
                allocated += size
                requested += block.get("requested_size", size)
                waste += size - block.get("requested_size", size)
            elif state == "active_pending_free":
                pending += size
                requested += block.get("requested_size", size)
            else:
                free += size
                free_blocks += 1
                largest_free = max(largest_free, size)
                if split:
                    non_releasable += size
                if seg.get("stream", 0) == stream and size > best.get(pool, 0):
                    best[pool] = size
    if allocated + pending + free != reserved:
        raise ValueError(f"snapshot does not add up: allocated {allocated} + pending {pending} + "
                         f"free {free} != reserved {reserved} (block sizes must tile segments)")
    now = max(largest_fitting_request(best.get("large", 0), rules),
              min(largest_fitting_request(best.get("small", 0), rules), K_SMALL_SIZE))
    return {
        "reserved_bytes": reserved, "allocated_bytes": allocated, "requested_bytes": requested,
        "reserved_unallocated_bytes": reserved - allocated, "pending_free_bytes": pending,
        "free_bytes": free, "free_blocks": free_blocks, "largest_free_block_bytes": largest_free,
        "external_fragmentation": (1.0 - largest_free / free) if free else 0.0,
        "non_releasable_bytes": non_releasable, "rounding_waste_bytes": waste,
        "utilization": (allocated / reserved) if reserved else 0.0,
        "segments": len(segments), "largest_request_now_bytes": now,
        "largest_request_bytes": None,
    }


def largest_fitting_request(block_size: int, rules: Rules) -> int:
    """The largest request whose rounded size a free block of ``block_size`` can serve."""
    def ok(r):
        return rules.block_fits(block_size, rules.round_size(r))
    if block_size > 0 and ok(block_size):
        return block_size  # the whole block (oversize blocks only ever serve oversize requests)
    return _last_true(block_size, ok)


def _last_true(limit: int, ok) -> int:
    """The largest r in 1..limit with ok(r), or 0; ok must hold for a prefix (round_size is
    monotone), so a binary search finds it in ~log2(limit) steps."""
    if limit <= 0 or not ok(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def largest_request_at_all(segments, rules: Rules, total_memory: int, now: int) -> int:
    """Largest request that succeeds, after the OOM path releases every whole free segment.

    c10's malloc tries a cached block, then cudaMalloc, then frees cached segments
    (``release_cached_blocks``) and retries cudaMalloc. Only unsplit free segments can be freed.
    """
    reserved = sum(s["total_size"] for s in segments)
    releasable = 0
    for seg in segments:
        blocks = seg["blocks"]
        if seg.get("is_expandable", False):
            releasable += sum(b["size"] for b in blocks if b["state"] == "inactive")
        elif len(blocks) == 1 and blocks[0]["state"] == "inactive":
            releasable += seg["total_size"]
    budget = max(total_memory - reserved + releasable, 0)
    if rules.expandable:
        # growth maps whole large-pool pages of the rounded request, not get_allocation_size
        page = rules.page_size("large")
        fresh = budget // page * page
    else:
        fresh = _last_true(budget, lambda r: rules.allocation_size(rules.round_size(r)) <= budget)
    return max(now, fresh)


def find_fit(segments, request_bytes: int, rules: Rules, *, stream: int = 0):
    """Where c10's ``get_free_block`` would put a request now, or None if no cached block fits.

    Best fit as in c10: the smallest free block of the right pool on the same stream that is at
    least the rounded size, lowest address among equals. Returns a dict with the segment
    number (address order), block address and size, and the bytes the request would take
    (the whole block when ``should_split`` says no).
    """
    request_bytes = parse_size(request_bytes, name="request")
    rounded = rules.round_size(request_bytes)
    pool = rules.pool(rounded)
    best = None
    for index, seg in enumerate(segments):
        if seg.get("segment_type", "large") != pool or seg.get("stream", 0) != stream:
            continue
        if seg.get("is_expandable", False) and not rules.expandable:
            continue  # c10 skips expandable blocks when expandable segments are off
        offset = seg["address"]
        for block in seg["blocks"]:
            address = block.get("address", offset)
            offset = address + block["size"]
            if block["state"] != "inactive" or not rules.block_fits(block["size"], rounded):
                continue
            key = (block["size"], address)
            if best is None or key < best[0]:
                best = (key, index, seg)
    if best is None:
        return None
    (size, address), index, seg = best
    split = seg.get("is_expandable", False) or rules.should_split(pool, size, rounded)
    take = rounded if split and size - rounded >= 512 else size
    return {"request_bytes": request_bytes, "rounded_bytes": rounded, "pool": pool,
            "segment": index, "address": address, "offset_bytes": address - seg["address"],
            "block_bytes": size, "take_bytes": take}
