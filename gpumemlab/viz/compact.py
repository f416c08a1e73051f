"""A recorded history packed for the browser: every segment and block as one record with a lifetime.

The browser block map (``gpumemlab/viz/canvas_player.js``) receives a recording once and must
jump to any event without asking the kernel. Rather than a state per event, each segment and
each live block (allocated or pending free) is one record that holds between two times: ``t0``
(the number of events applied when it appeared) and ``t1`` (when it changed or went). The state
after event ``k`` is every record with ``t0 <= k + 1 < t1``; free blocks are not stored, because
c10 merges neighbouring free blocks (``try_merge_blocks``), so each gap between live blocks is
exactly one free block (as in :mod:`gpumemlab.viz.state`). A jump is one scan of typed arrays.

The records come from one walk over :class:`~gpumemlab.viz.history.History`'s own ``apply``: only
the block at an entry's address (block entries), or the segments around it (segment entries), are
compared before and after, so a record is never guessed from the trace twice.

``encode(history)`` returns ``(meta, data)``: ``meta`` is JSON (counts, frame strings, action
names and where each column lies in ``data``), ``data`` the columns as little-endian typed arrays,
each padded to 8 bytes so that JavaScript can view them in place. ``decode(meta, data)`` reads
them back in Python (the round trip the tests check against the History). A block's ``born`` is
the time of the alloc that made it, kept when its free is requested: the order in which the
browser's stacked timeline piles the live blocks, as ``gpumemlab.viz.active_timeline`` does.
"""
from __future__ import annotations

import sys
from array import array

from gpumemlab.viz.frames import culprit_frame
from gpumemlab.viz.state import ALLOCATED, INACTIVE, PENDING

STATE_CODES = {ALLOCATED: 1, PENDING: 2}
STATE_NAMES = {code: name for name, code in STATE_CODES.items()}
POOLS = ("large", "small")
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot")
_BLOCK_ACTIONS = ("alloc", "free_requested", "free_completed")
_SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")

# column name -> array typecode; "d" float64 holds addresses and sizes exactly up to 2**53
SEGMENT_COLUMNS = {"seg_address": "d", "seg_size": "d", "seg_stream": "d", "seg_t0": "i",
                   "seg_t1": "i", "seg_pool": "B", "seg_expandable": "B"}
BLOCK_COLUMNS = {"block_address": "d", "block_size": "d", "block_requested": "d",
                 "block_t0": "i", "block_t1": "i", "block_state": "B", "block_frame": "i",
                 "block_born": "i"}
EVENT_COLUMNS = {"event_allocated": "d", "event_reserved": "d", "event_action": "B"}
_JS_TYPES = {"d": "Float64Array", "i": "Int32Array", "B": "Uint8Array"}


class _Records:
    """Open and closed records of one kind; ``key`` identifies a record while it is open."""

    def __init__(self, columns):
        self.cols = {name: array(code) for name, code in columns.items()}
        self.prefix = next(iter(columns)).split("_")[0]
        self.open = {}  # key -> record number

    def start(self, key, t: int, **values) -> None:
        self.open[key] = len(self.cols[f"{self.prefix}_t0"])
        for name, value in values.items():
            self.cols[f"{self.prefix}_{name}"].append(value)
        self.cols[f"{self.prefix}_t0"].append(t)
        self.cols[f"{self.prefix}_t1"].append(-1)  # filled when it closes

    def end(self, key, t: int) -> None:
        self.cols[f"{self.prefix}_t1"][self.open.pop(key)] = t

    def finish(self, t_end: int) -> None:
        for number in self.open.values():
            self.cols[f"{self.prefix}_t1"][number] = t_end
        self.open = {}


def _seg_key(seg):
    return (seg.address, seg.size, seg.pool, seg.stream, seg.expandable)


def _block_keys(seg, addresses):
    return {(a, seg.blocks[a][0] or 0, seg.blocks[a][1], seg.blocks[a][2]) for a in addresses
            if a in seg.blocks}


def _view(state, action, addr, size):
    """(segment keys, block keys) of the part of ``state`` that entry can change."""
    if action in _BLOCK_ACTIONS:
        seg = state.find(addr)
        return set(), (_block_keys(seg, (addr,)) if seg is not None else set())
    segs = {id(s): s for s in (state.find(p) for p in (addr - 1, addr, addr + size) if p >= 0)
            if s is not None}
    blocks = set()
    for seg in segs.values():
        blocks |= _block_keys(seg, seg.starts)
    return {_seg_key(s) for s in segs.values()}, blocks


class _Frames:
    """Frame strings interned: a block carries the number of its allocating frame, or -1."""

    def __init__(self):
        self.names, self._number = [], {}

    def number(self, frames) -> int:
        f = culprit_frame(frames) if frames else None
        if f is None:
            return -1
        text = f"{f.get('filename')}:{f.get('line')} {f.get('name')}"
        if text not in self._number:
            self._number[text] = len(self.names)
            self.names.append(text)
        return self._number[text]


def encode(history) -> tuple[dict, bytes]:
    """Pack ``history`` (a :class:`History`) as ``(meta, data)`` for the browser."""
    events = history.events
    n = len(events)
    segs, blocks, frames = _Records(SEGMENT_COLUMNS), _Records(BLOCK_COLUMNS), _Frames()
    frame_at = {}  # block address -> frame number of the alloc that made it
    born_at = {}   # block address -> t of the alloc that made it (the stacked timeline's order)
    for s in history.final_segments:   # blocks alive at the end keep their recorded frames
        offset = s["address"]
        for b in s["blocks"]:
            addr = b.get("address", offset)
            if b["state"] != INACTIVE:
                frame_at[addr] = frames.number(b.get("frames"))
            offset = addr + b["size"]

    def open_seg(key, t):
        address, size, pool, stream, expandable = key
        segs.start(key, t, address=address, size=size, stream=stream,
                   pool=POOLS.index(pool) if pool in POOLS else 0, expandable=int(expandable))

    def open_block(key, t):
        address, size, requested, state = key
        blocks.start(key, t, address=address, size=size, requested=requested,
                     state=STATE_CODES[state], frame=frame_at.get(address, -1),
                     born=born_at.get(address, t))

    state = history.initial.copy()
    for seg in (state.segs[a] for a in state.addrs):
        open_seg(_seg_key(seg), 0)
        for key in sorted(_block_keys(seg, seg.starts)):
            open_block(key, 0)
    for i, e in enumerate(events):
        action, addr, size = e.get("action"), e.get("addr", 0), e.get("size", 0)
        if action not in _BLOCK_ACTIONS and action not in _SEGMENT_ACTIONS:
            continue  # oom, snapshot and the like change no layout
        seg_before, block_before = _view(state, action, addr, size)
        history.apply(state, i)
        seg_after, block_after = _view(state, action, addr, size)
        if action == "alloc":
            frame_at[addr] = frames.number(e.get("frames"))
            born_at[addr] = i + 1
        t = i + 1
        for key in seg_before - seg_after:
            segs.end(key, t)
        for key in sorted(seg_after - seg_before):
            open_seg(key, t)
        for key in block_before - block_after:
            blocks.end(key, t)
        for key in sorted(block_after - block_before):
            open_block(key, t)
    segs.finish(n + 1)
    blocks.finish(n + 1)

    actions = list(ACTIONS)
    action_col = array("B")
    for e in events:
        a = e.get("action")
        if a not in actions:
            actions.append(a)
        action_col.append(actions.index(a) if len(actions) < 256 else 255)
    columns = {**segs.cols, **blocks.cols,
               "event_allocated": array("d", history.totals["allocated_bytes"]),
               "event_reserved": array("d", history.totals["reserved_bytes"]),
               "event_action": action_col}
    data, layout = _pack(columns)
    meta = {"version": 1, "n_events": n, "n_segments": len(segs.cols["seg_t0"]),
            "n_blocks": len(blocks.cols["block_t0"]), "frames": frames.names,
            "actions": actions, "states": {str(c): s for c, s in STATE_NAMES.items()},
            "pools": list(POOLS), "columns": layout,
            "total_memory": history.source.total_memory}
    return meta, data


def _pack(columns) -> tuple[bytes, dict]:
    """Columns end to end, each padded to a multiple of 8 bytes; their places as JSON."""
    out, layout = bytearray(), {}
    for name, col in columns.items():
        if sys.byteorder != "little":
            col = array(col.typecode, col)
            col.byteswap()
        raw = col.tobytes()
        layout[name] = {"type": _JS_TYPES[col.typecode], "offset": len(out), "length": len(col)}
        out += raw + bytes(-len(raw) % 8)
    return bytes(out), layout


def columns(meta: dict, data: bytes) -> dict:
    """The columns of a payload as Python arrays."""
    codes = {v: k for k, v in _JS_TYPES.items()}
    out = {}
    for name, place in meta["columns"].items():
        col = array(codes[place["type"]])
        width = col.itemsize
        col.frombytes(data[place["offset"]:place["offset"] + place["length"] * width])
        if sys.byteorder != "little":
            col.byteswap()
        out[name] = col
    return out


def decode(meta: dict, data: bytes, k: int) -> list:
    """The block map after event ``k`` (``-1``: before the first), read from a payload.

    A list of segments in address order, each ``(address, size, pool, stream, expandable,
    blocks)`` with ``blocks`` as ``(address, size, requested, state)`` free gaps included, the
    shape of :meth:`gpumemlab.viz.state.Seg.layout`. This is what the browser draws.
    """
    c = columns(meta, data)
    t = k + 1
    segs = sorted((c["seg_address"][i], c["seg_size"][i], meta["pools"][c["seg_pool"][i]],
                   c["seg_stream"][i], bool(c["seg_expandable"][i]))
                  for i in range(meta["n_segments"]) if c["seg_t0"][i] <= t < c["seg_t1"][i])
    live = sorted((c["block_address"][i], c["block_size"][i], c["block_requested"][i],
                   STATE_NAMES[c["block_state"][i]])
                  for i in range(meta["n_blocks"]) if c["block_t0"][i] <= t < c["block_t1"][i])
    out, j = [], 0
    for address, size, pool, stream, expandable in segs:
        layout, cursor, end = [], address, address + size
        while j < len(live) and live[j][0] < end:
            b = live[j]
            if b[0] >= address:
                if b[0] > cursor:
                    layout.append((cursor, b[0] - cursor, 0, INACTIVE))
                layout.append(b)
                cursor = b[0] + b[1]
            j += 1
        if cursor < end:
            layout.append((cursor, end - cursor, 0, INACTIVE))
        out.append((address, size, pool, stream, expandable, layout))
    return out
