"""Memory pool ids in snapshot files: a segment's ``segment_pool_id`` and a trace entry's
``pool_id`` (c10 ``MempoolId_t``) are two non-negative ints; PyTorch writes tuples, JSON lists."""
from __future__ import annotations


def check_pool_id(w, value, where, key) -> tuple:
    """``value`` as a tuple, or ``w.fail`` naming the place."""
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)):
        w.fail(where, f"{key!r} is {value!r}, expected two non-negative ints like (0, 0)")
    return tuple(value)


def trace_pool_id(w, entry, where, k, action):
    """``entry`` (``where[k]``, an ``action``), or a copy whose ``pool_id`` is the tuple PyTorch
    writes."""
    pool_id = entry.get("pool_id")
    if pool_id is None:
        return entry
    # The common case, checked without building the error location (a 2M-entry trace: seconds).
    if (type(pool_id) is tuple and len(pool_id) == 2 and type(pool_id[0]) is int
            and type(pool_id[1]) is int and pool_id[0] >= 0 and pool_id[1] >= 0):
        return entry
    checked = check_pool_id(w, pool_id, f"{where}[{k}] ({action})", "pool_id")
    if checked is pool_id:
        return entry
    entry = dict(entry)
    entry["pool_id"] = checked
    return entry
