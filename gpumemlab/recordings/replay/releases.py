"""Replaying the allocator's releases: recorded ``segment_free``/``segment_unmap`` bursts made
exactly on the model (c10 ``release_block`` / ``unmap_block``), telling a user ``empty_cache()``
from a release inside a malloc, and leaving blocks freed-but-pending at the end of a recording."""
from __future__ import annotations

from gpumemlab.allocator import K_SMALL_SIZE, round_size
from gpumemlab.allocator.fit import oversize_allows


def _release_recorded(alloc, action, addr, size, pages=None):
    """Make the recorded release ``action`` at (translated) ``addr`` on the model; return the
    released Block, or None when the model has nothing there that this release would free.
    ``pages``: the burst's ``FreePages`` index (one is made when not given)."""
    pools = alloc.all_block_pools()   # default and private pools: a release names its address
    if action == "segment_free":
        # cudaFree of a whole free segment (release_block): its only block, free, at addr
        for pool in pools:
            blk = pool.by_ptr.get(addr)
            if blk is not None:
                if (blk.prev is None and blk.next is None and blk.expandable_segment is None
                        and blk.size == size):
                    alloc.release_block(blk, None)
                    return blk
                return None
        return None
    # segment_unmap: unmap_block of the free expandable block whose whole pages are the range
    blk = (pages or FreePages(alloc)).find(addr)
    if blk is None or _whole_pages(blk) != (addr, size):
        return None
    alloc.unmap_block(blk, None)
    if blk.prev is None and blk.next is None:     # as release_blocks does
        alloc.release_expandable_segment(blk)
    return blk


def _whole_pages(blk):
    """(address, bytes) of the whole pages inside a free expandable block (c10 unmap_block's
    range); bytes <= 0 when it holds none."""
    es = blk.expandable_segment
    page = es.segment_size
    lo = es.ptr + -(-(blk.ptr - es.ptr) // page) * page
    hi = es.ptr + (blk.ptr + blk.size - es.ptr) // page * page
    return lo, hi - lo


class FreePages:
    """The free expandable blocks of every pool by the first whole page they hold, built once
    per release burst and only when a release does not start at a block's own address: each
    recorded ``segment_unmap`` is then a dict lookup, not a copy and scan of every cached block.

    Within a burst only its own releases change the model, and an unmap leaves every other
    indexed block as it was (the pieces it cuts off before and after hold no whole page), so the
    index stays good through the burst: a miss is a release the model cannot make, and a hit on
    a block this burst already released is dropped. Neither rebuilds it, so a burst of many
    releases the model cannot make costs one pass, not one per release."""

    def __init__(self, alloc):
        self.alloc = alloc
        self.by_page = None

    def find(self, addr):
        """The free expandable block whose first whole page is at ``addr``, or None."""
        pools = self.alloc.all_block_pools()
        for pool in pools:    # the common case: the block starts on the page
            blk = pool.by_ptr.get(addr)
            if blk is not None:
                return blk if blk.expandable_segment is not None else None
        if self.by_page is None:
            self.by_page = self._build(pools)
        blk = self.by_page.get(addr)
        if blk is None or self._current(blk, addr):
            return blk
        del self.by_page[addr]     # unmapped or released earlier in this burst
        return None

    @staticmethod
    def _current(blk, addr) -> bool:
        return (blk.pool.by_ptr.get(blk.ptr) is blk and blk.ptr <= addr < blk.ptr + blk.size
                and _whole_pages(blk)[0] == addr)

    @staticmethod
    def _build(pools) -> dict:
        by_page = {}
        for pool in pools:
            for blk in pool.by_ptr.values():
                if blk.expandable_segment is not None:
                    lo = _whole_pages(blk)[0]
                    if lo < blk.ptr + blk.size:   # a page starts inside: one block per key
                        by_page[lo] = blk
        return by_page


def _release_rest(alloc):
    """``empty_cache()`` on the model; returns how many segments it released or unmapped."""
    before = alloc.stats.num_device_free
    alloc.empty_cache()
    return alloc.stats.num_device_free - before


def _was_empty_cache(alloc, trace, j, released):
    """A release burst before a malloc that grew the pool was a user ``empty_cache()`` (not a
    release inside that malloc) when a released segment could have served the malloc: c10
    ``malloc`` tries ``get_free_block`` before it releases anything."""
    if not released:
        return False
    n = len(trace)
    while j < n and trace[j]["action"] in ("segment_alloc", "segment_map"):
        j += 1
    if j == n or trace[j]["action"] != "alloc":
        return False
    e = trace[j]
    config = alloc.config
    size = round_size(max(e["size"], 1), config)
    small = size <= K_SMALL_SIZE
    for blk in released:
        if blk.expandable_segment is not None or blk.pool.is_small != small:
            continue
        if blk.stream == e["stream"] and blk.size >= size and oversize_allows(blk.size, size, config):
            return True
    return False


def _leave_pending(alloc, live, requested_frees):
    """Blocks the recording freed but whose other-stream events had not completed by its end
    are ``active_pending_free`` in its final snapshot: leave them so in the model too (freed
    with a stream use, so an event stays outstanding)."""
    for addr in sorted(requested_frees):
        blk = live.pop(addr, None)
        if blk is not None:
            alloc.record_stream(blk, blk.stream + 1)
            alloc.free(blk)
