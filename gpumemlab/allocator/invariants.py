"""``check_invariants``: what must hold between any two operations of the allocator.

Run by the property tests after every operation. Checks that blocks tile their segments exactly
(contiguous addresses, symmetric prev/next links), that free neighbours have always been merged,
that a block sits in its pool's free set exactly when it is free and mapped, that every
statistic equals a recount from the blocks, and that allocated <= reserved <= capacity.
"""
from __future__ import annotations

from .constants import AGGREGATE, LARGE_POOL, SMALL_POOL


class InvariantError(AssertionError):
    pass


def _require(condition, message):
    if not condition:
        raise InvariantError(message)


def _is_free(b) -> bool:
    return not b.allocated and b.event_count == 0 and not b.stream_uses


def all_chains(alloc) -> list:
    """Every segment chain (cudaMalloc'd segment or expandable segment), head first."""
    seen = set()
    chains = []
    candidates = []
    for pool in (alloc.small_blocks, alloc.large_blocks):
        candidates.extend(pool.blocks())
        candidates.extend(pool.unmapped_blocks())
    candidates.extend(alloc.active_blocks.values())
    for b in candidates:
        head = b
        while head.prev is not None:
            head = head.prev
        if id(head) in seen:
            continue
        seen.add(id(head))
        chain = []
        while head is not None:
            chain.append(head)
            head = head.next
        chains.append(chain)
    return chains


def check_invariants(alloc) -> None:
    max_split = alloc.config.max_split_size
    count = {k: [0, 0, 0] for k in ("allocation", "allocated_bytes", "active", "active_bytes",
                                    "requested_bytes", "segment", "reserved_bytes",
                                    "inactive_split", "inactive_split_bytes")}
    oversize_alloc = oversize_seg = 0
    active_seen = {}
    for chain in all_chains(alloc):
        head = chain[0]
        pool = head.pool
        types = (AGGREGATE, SMALL_POOL if pool.is_small else LARGE_POOL)
        es = head.expandable_segment
        split = len(chain) > 1
        if es is None:
            seg_size = sum(b.size for b in chain)
            _require(alloc.driver.segments.get(head.ptr) == seg_size,
                     f"segment at {head.ptr:#x} ({seg_size} B) does not match a cudaMalloc")
            for t in types:
                count["segment"][t] += 1
                count["reserved_bytes"][t] += seg_size
            if seg_size >= max_split:
                oversize_seg += 1
        else:
            _require(head.ptr == es.ptr and sum(b.size for b in chain) == es.size(),
                     "expandable segment blocks do not cover its address range")
            mapped = sum(b.size for b in chain if b.mapped)
            _require(mapped == sum(es.handles) * es.segment_size,
                     "mapped blocks disagree with the expandable segment's mapped pages")
            for t in types:
                count["reserved_bytes"][t] += mapped
        prev = None
        for b in chain:
            _require(b.pool is pool and b.expandable_segment is es, f"{b!r} changed segment or pool")
            _require(b.prev is prev, f"{b!r}: broken prev link")
            if prev is not None:
                _require(prev.next is b, f"{prev!r}: broken next link")
                _require(prev.ptr + prev.size == b.ptr, f"{prev!r} and {b!r} are not contiguous")
            _require(b.size > 0, f"{b!r} has no size")
            _require(b.stream == head.stream, f"{b!r} is on another stream than its segment")
            free = _is_free(b)
            if not b.mapped:
                _require(free and es is not None, f"{b!r}: only free expandable space may be unmapped")
                _require(pool.unmapped_by_ptr.get(b.ptr) is b, f"{b!r} missing from the unmapped set")
                _require(not pool.contains(b), f"{b!r} is unmapped but in the free set")
            elif free:
                _require(pool.contains(b), f"free {b!r} missing from its pool")
                if prev is not None:
                    _require(not (_is_free(prev) and prev.mapped),
                             f"free neighbours {prev!r} and {b!r} were not merged")
                if es is None and split:
                    for t in types:
                        count["inactive_split"][t] += 1
                        count["inactive_split_bytes"][t] += b.size
            else:
                _require(not pool.contains(b), f"active {b!r} is in the free pool")
                _require(alloc.active_blocks.get(b.ptr) is b, f"active {b!r} missing from active_blocks")
                active_seen[b.ptr] = b
                for t in types:
                    count["active"][t] += 1
                    count["active_bytes"][t] += b.size
                    count["requested_bytes"][t] += b.requested_size
                if b.allocated:
                    for t in types:
                        count["allocation"][t] += 1
                        count["allocated_bytes"][t] += b.size
                    if b.size >= max_split:
                        oversize_alloc += 1
            prev = b
    _require(len(active_seen) == len(alloc.active_blocks), "active_blocks holds a stale block")
    stats = alloc.stats
    for name, values in count.items():
        for t in (AGGREGATE, SMALL_POOL, LARGE_POOL):
            stat = getattr(stats, name)[t]
            _require(stat.current == values[t],
                     f"stat {name}[{t}] is {stat.current}, a recount gives {values[t]}")
            _require(stat.peak >= stat.current, f"stat {name}[{t}] peak below current")
            _require(stat.current >= 0, f"stat {name}[{t}] is negative")
    if alloc.oversize_stats_exact:
        _require(stats.oversize_allocations.current == oversize_alloc, "oversize_allocations recount")
        _require(stats.oversize_segments.current == oversize_seg, "oversize_segments recount")
    reserved = stats.reserved_bytes[AGGREGATE].current
    _require(alloc.total_allocated_memory == reserved, "total_allocated_memory != reserved_bytes")
    _require(alloc.driver.used_bytes == reserved, "driver memory in use != reserved_bytes")
    _require(stats.allocated_bytes[AGGREGATE].current <= reserved <= alloc.driver.total_memory,
             "allocated <= reserved <= capacity does not hold")
    for pool in (alloc.small_blocks, alloc.large_blocks):
        _require(pool.keys == sorted(pool.keys), "pool order broken")
        _require(len(pool.keys) == len(pool.by_ptr), "pool index out of step")
