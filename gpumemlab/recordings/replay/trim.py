"""A faithful replay on a card smaller than what the recording held when it began.

A recording that begins mid-run (``_record_memory_history`` called late, or a full ring buffer)
starts with segments that were reserved on the recording's card: live blocks and cached free
memory. On a smaller card that state cannot exist as recorded, but only its *live* part is
forced on the run: the cache is what c10 gives back when a ``cudaMalloc`` fails.
``DeviceCachingAllocator::malloc`` retries a failed ``alloc_block`` after
``release_available_cached_blocks`` (oversize blocks, under ``max_split_size``) and then after
``release_cached_blocks``, which frees every cached block that is a whole segment (neither
``prev`` nor ``next``) and unmaps the free pages of expandable segments. The start state on the
smaller card is therefore the recorded one after that release:

* live bytes more than the card: the run cannot reach its first entry (an OOM before entry 0
  whose figures are the live and cached bytes, never a "request");
* else the recorded state is rebuilt, then ``release_cached_blocks`` runs on it; when what
  stays reserved (segments that hold a live block, with their free parts) fits, the replay goes
  on faithfully from there;
* else the recorded layout itself does not fit: the live allocations are made again with the
  model's own addresses (as a what-if starts) and the replay goes on as a what-if.

``start_trim`` on the result says which happened, with the figures.
"""
from __future__ import annotations

from .start import build_start_state

__all__ = ["start_live_bytes", "trim_start"]


def start_live_bytes(state) -> int:
    """Bytes of the blocks live when the recording began. A block freed before then whose
    stream events were still pending is not counted: ``release_cached_blocks`` waits for every
    event first (``synchronize_and_free_events``), so it becomes cache."""
    return sum(p.size for p in state.live.values())


def trim_start(alloc, state, translate, router, needed: int, start_whatif):
    """Start ``alloc`` (whose card is too small for the ``needed`` recorded bytes) as c10 would.

    Returns ``(live, start_problems, start_oom, faithful, info)``: ``live`` maps recorded
    addresses to blocks; ``faithful`` is False when the replay must go on as a what-if;
    ``info`` is the result's ``start_trim``. ``start_whatif(alloc, state, router)`` makes the
    live allocations with model addresses (replay.py's what-if start).
    """
    driver = alloc.driver
    card = driver.total_memory
    free = card - driver.used_bytes - driver.other_bytes
    live_bytes = start_live_bytes(state)
    info = {"card_free_bytes": free, "recorded_reserved_bytes": needed,
            "live_bytes": live_bytes, "cached_bytes": needed - live_bytes,
            "released_bytes": 0, "reserved_after_bytes": None, "outcome": None}
    if live_bytes > free:
        info["outcome"] = "live bytes do not fit"
        oom = {"index": 0, "entry": None, "size": None, "during": "start state",
               "live_bytes": live_bytes, "cached_bytes": needed - live_bytes,
               "shortfall_bytes": live_bytes - free,
               "message": f"out of memory before the first entry: {live_bytes} bytes were live "
                          f"when recording began, the card has {free} bytes free"}
        return {}, [], oom, True, info
    limit = alloc.allowed_memory_maximum              # a recorded memory fraction, if any
    driver.total_memory = card + (needed - free)      # room for the recorded state, for now
    alloc.allowed_memory_maximum = None
    try:
        live, problems = build_start_state(alloc, state, translate, router)
        before = driver.used_bytes
        alloc.release_cached_blocks(None)             # c10's last retry before an OOM
        info["released_bytes"] = before - driver.used_bytes
    finally:
        driver.total_memory, alloc.allowed_memory_maximum = card, limit
    info["reserved_after_bytes"] = driver.used_bytes
    if driver.can_allocate(0):
        info["outcome"] = "cache released"
        return live, problems, None, True, info
    # segments that hold live blocks still do not fit: start over from the live blocks alone
    for blk in live.values():
        alloc.free(blk)
    driver.total_memory = card + driver.used_bytes
    try:
        alloc.release_cached_blocks(None)
    finally:
        driver.total_memory = card
    live, oom = start_whatif(alloc, state, router)
    info["outcome"] = "layout does not fit: live blocks placed by the model"
    return live, [], oom, False, info
