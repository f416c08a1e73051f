"""``check_invariants``: what must hold between any two operations of the allocator.

Run by the property tests after every operation. Checks that blocks tile their segments exactly
(contiguous addresses, symmetric prev/next links), that free neighbours have always been merged,
that a block sits in its pool's free set exactly when it is free and mapped, that every
statistic equals a recount from the blocks, and that allocated <= reserved <= capacity.
Private pools (pools.py): every block belongs to the default pools or to a pool the allocator
still knows; a pool's reserved bytes, segment count (cudaMalloc_count) and use_count agree with
its blocks, its users and the freeable set; captures and deferred frees are consistent.
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
    for pool in alloc.all_block_pools():
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
    known_pools = {id(p) for p in alloc.all_block_pools()}
    pool_reserved = {}  # private pool id -> [all, small, large] reserved bytes recount
    pool_segments = {}  # private pool id -> cudaMalloc'd segments
    for chain in all_chains(alloc):
        head = chain[0]
        pool = head.pool
        _require(id(pool) in known_pools, f"{head!r} belongs to a pool the allocator forgot")
        owner = pool.owner_private_pool
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
            reserved_here = seg_size
            if owner is not None:
                pool_segments[owner.id] = pool_segments.get(owner.id, 0) + 1
        else:
            _require(head.ptr == es.ptr and sum(b.size for b in chain) == es.size(),
                     "expandable segment blocks do not cover its address range")
            mapped = sum(b.size for b in chain if b.mapped)
            _require(mapped == es.mapped_pages() * es.segment_size,
                     "mapped blocks disagree with the expandable segment's mapped pages")
            for t in types:
                count["reserved_bytes"][t] += mapped
            reserved_here = mapped
        if owner is not None and reserved_here:
            r = pool_reserved.setdefault(owner.id, [0, 0, 0])
            for t in types:
                r[t] += reserved_here
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
    for pool in alloc.all_block_pools():
        try:
            pool.keys.check()
        except AssertionError as exc:
            raise InvariantError(f"pool order broken: {exc}") from None
        _require(len(pool.keys) == len(pool.by_ptr), "pool index out of step")
        _require(all(pool.contains(b) for b in pool.blocks()), "pool keys and blocks disagree")
    _check_private_pools(alloc, pool_reserved, pool_segments)


def _check_private_pools(alloc, pool_reserved, pool_segments) -> None:
    for pid, pp in alloc.graph_pools.items():
        _require(pp.id == pid and pid != (0, 0), f"pool {pid} is filed under the wrong id")
        _require(pp.use_count >= 0, f"pool {pid} has a negative use_count")
        _require((pp.use_count == 0) == (pid in alloc.graph_pools_freeable),
                 f"pool {pid}: use_count {pp.use_count} disagrees with the freeable set")
        _require(all(b.pool.owner_private_pool is pp for pool in pp.block_pools()
                     for b in pool.blocks()), f"pool {pid} holds another pool's free block")
        if not any(b.expandable_segment is not None for pool in pp.block_pools()
                   for b in pool.blocks() + pool.unmapped_blocks()):
            _require(pp.cudaMalloc_count == pool_segments.get(pid, 0),
                     f"pool {pid}: cudaMalloc_count {pp.cudaMalloc_count}, "
                     f"{pool_segments.get(pid, 0)} segments")
    for pid, pp in alloc.graph_pools_freeable.items():
        _require(alloc.graph_pools.get(pid) is pp, f"freeable pool {pid} is not a known pool")
    for pid, _ in alloc.captures_underway:
        pp = alloc.graph_pools.get(pid)
        _require(pp is not None and pp.use_count > 0,
                 f"allocations are diverted to pool {pid}, which has no user")
    _require(len({pid for pid, _ in alloc.captures_underway}) == len(alloc.captures_underway),
             "one pool is recorded to twice")
    _require(0 <= alloc.num_active_captures <= len(alloc.captures_underway),
             "more graph captures than diversions")
    for b in alloc.deferred_blocks:
        _require(not b.allocated and b.stream_uses and b.event_count == 0,
                 f"deferred {b!r} is not a freed block waiting for other streams")
        _require(alloc.active_blocks.get(b.ptr) is b, f"deferred {b!r} left active_blocks")
    recorded = alloc.private_pool_stats.by_id
    for pid in set(recorded) | set(pool_reserved):
        want = pool_reserved.get(pid, [0, 0, 0])
        have = [s.current for s in recorded[pid]] if pid in recorded else [0, 0, 0]
        _require(have == want, f"reserved_bytes_by_private_pools[{pid}] is {have}, "
                               f"a recount gives {want}")
        _require(pid in alloc.graph_pools or want == [0, 0, 0],
                 f"forgotten pool {pid} still holds memory")
