"""Hand-built snapshots in PyTorch's ``_snapshot()`` format, for the view and metric tests."""


def seg(addr, blocks, pool="large", expandable=False, stream=0):
    """A segment dict at ``addr`` from (size, requested_size, state) block triples, in order."""
    out, off = [], addr
    for size, req, state in blocks:
        out.append({"address": off, "size": size, "requested_size": req, "state": state,
                    "frames": []})
        off += size
    return {"device": 0, "address": addr, "total_size": off - addr, "stream": stream,
            "segment_type": pool, "segment_pool_id": (0, 0), "is_expandable": expandable,
            "frames": [], "blocks": out}
