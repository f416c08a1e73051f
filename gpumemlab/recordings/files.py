"""Snapshot files: safe loading, layout normalisation and dumping.

Models the files written by ``torch.cuda.memory._dump_snapshot`` (a pickle of
``torch.cuda.memory._snapshot()``, see docs/ALLOCATOR.md#snapshot-format) and their JSON equivalent.

A snapshot file is untrusted input: someone may hand a learner a "production snapshot". Loading
therefore uses a restricted unpickler that refuses every global (snapshots hold only dicts, lists,
tuples, strings, numbers, booleans and None), so a crafted pickle can never run code or import
anything; it gets a ``SnapshotError`` naming the file and the problem instead.

Layouts from any PyTorch 2.x (and the <=2.0 ``history`` blocks) are normalised to the current one;
every default filled in is reported once as a ``SnapshotWarning``.
This module must import without torch.
"""
from __future__ import annotations

import json
import os
import pickle
import tempfile
import warnings
from pathlib import Path

from gpumemlab.allocator.snapshot import BLOCK_STATES
from gpumemlab.allocator.trace import TRACE_ACTIONS

from .bounded_read import read_regular_file
from .gc_pause import collector_paused
from .host_entries import read_host_entries
from .pool_ids import check_pool_id, trace_pool_id
from .segment_checks import check_no_overlap, check_segment_types
from .unpickle import NoGlobalsUnpickler, Refused, bounded_load
from .value_checks import check_values, json_int

__all__ = ["SnapshotError", "SnapshotWarning", "load_snapshot", "loads_snapshot", "dump_snapshot",
           "normalize_snapshot", "TRACE_ACTIONS", "BLOCK_STATES"]

# a snapshot bigger than this is refused before reading (a sanity cap, override with max_bytes)
DEFAULT_MAX_BYTES = 8 * 1024**3

# the _snapshot docstring names this state; the C++ emits active_pending_free
_STATE_ALIASES = {"active_awaiting_free": "active_pending_free"}

_SMALL_BUFFER_BYTES = 2 * 1024 * 1024   # kSmallBuffer: small-pool segments are exactly this


class SnapshotError(ValueError):
    """A snapshot file or dict that cannot be read; the message names the file and the problem."""


class SnapshotWarning(UserWarning):
    """A snapshot was read, but keys were missing and defaults were filled in."""


_Refused, _NoGlobalsUnpickler = Refused, NoGlobalsUnpickler


# ----------------------------------------------------------------------------- loading

def load_snapshot(path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict:
    """Read a snapshot file (pickle from ``_dump_snapshot`` or JSON) and return the normalised dict.

    Never executes code from the file. Raises ``SnapshotError`` for a missing, empty, truncated,
    oversized, hostile or malformed file, with the file name in the message.
    """
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if name is None:
        raise SnapshotError(f"load_snapshot expects a file path, got {type(path).__name__}")
    data = read_regular_file(name, max_bytes, SnapshotError, "snapshot file",
                             " (pass max_bytes= to read it anyway)")
    return loads_snapshot(data, name=name)


@collector_paused
def loads_snapshot(data: bytes, *, name: str = "<bytes>") -> dict:
    """Like ``load_snapshot`` for bytes already in memory."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SnapshotError(f"{name}: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data.strip():
        raise SnapshotError(f"{name}: the file is empty")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        raw = _parse_json(data, name)
    elif data[:2] == b"\x1f\x8b":
        raise SnapshotError(f"{name}: this is gzip-compressed; decompress it first (gunzip)")
    elif data[:1] == b"\x80":   # pickle protocol 2+ (what _dump_snapshot writes)
        raw = _parse_pickle(data, name)
    else:
        # protocol 0/1 pickles have no header: try, but call a failure "not a snapshot"
        try:
            raw = _parse_pickle(data, name)
        except SnapshotError as exc:
            if ": refused:" in str(exc):
                raise
            raise SnapshotError(f"{name}: not a memory snapshot (neither a pickle from "
                                f"torch.cuda.memory._dump_snapshot nor JSON)") from None
    # depth, huge integers, and shared references unfolding far beyond the file (a crafted
    # pickle): each distinct container counted once, as PyTorch's files share frames
    check_values(raw, name, len(data), SnapshotError)
    snapshot, notes = normalize_snapshot(raw, source=name, _budget=len(data) + 1000)
    if notes:
        warnings.warn(f"{name}: " + "; ".join(notes), SnapshotWarning, stacklevel=3)
    return snapshot


def _parse_pickle(data: bytes, name: str):
    try:
        return bounded_load(data)   # no globals; memory proportional to the file
    except EOFError:
        raise SnapshotError(f"{name}: the pickle is truncated (ended before its STOP mark)") from None
    except _Refused as exc:
        raise SnapshotError(f"{name}: refused: {exc}") from None
    except MemoryError:
        raise SnapshotError(f"{name}: the pickle asks for more memory than is available") from None
    except RecursionError:
        raise SnapshotError(f"{name}: the pickle is nested too deeply") from None
    except Exception as exc:   # malformed opcodes surface as many types (ValueError, KeyError, ...)
        raise SnapshotError(f"{name}: not a valid pickle ({type(exc).__name__}: {exc})") from None


def _parse_json(data: bytes, name: str, parse_int=None):
    try:
        return json.loads(data.decode("utf-8"), parse_int=parse_int)
    except UnicodeDecodeError:
        raise SnapshotError(f"{name}: JSON snapshot is not UTF-8 text") from None
    except RecursionError:
        raise SnapshotError(f"{name}: the JSON is nested too deeply") from None
    except ValueError as exc:
        if parse_int is None and "integer string conversion" in str(exc):
            # an integer of over 4300 digits: read it again, keeping such numbers unconverted,
            # so that check_values names the entry (a hook on every number costs 25%)
            return _parse_json(data, name, parse_int=json_int)
        raise SnapshotError(f"{name}: malformed JSON ({exc})") from None


# ----------------------------------------------------------------------------- normalising

class _Walker:
    """Counts the containers visited, so shared-reference bombs end with an error, not a hang."""

    def __init__(self, source, budget):
        self.source, self.budget, self.notes = source, budget, {}

    def tick(self, n=1):
        if self.budget is not None:
            self.budget -= n
            if self.budget < 0:
                raise SnapshotError(f"{self.source}: the file reuses the same objects far more often "
                                    f"than a real snapshot (a crafted pickle?); refused")

    def fail(self, where, problem):
        raise SnapshotError(f"{self.source}: {where}: {problem}")

    def note(self, text):
        self.notes[text] = self.notes.get(text, 0) + 1


def _int(w, d, key, where):
    value = d.get(key)
    if value is None:
        w.fail(where, f"missing {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        w.fail(where, f"{key!r} is {type(value).__name__}, expected an integer")
    return value


def normalize_snapshot(data, *, source: str = "<snapshot>", _budget=None):
    """Check a snapshot dict (or a bare segment list) and return ``(snapshot, notes)``.

    The result has the current layout (§7): every segment and block key present, block
    addresses filled in, old ``history`` blocks converted, ``device_traces`` present. ``notes``
    lists the defaults that were filled in. Input dicts are not modified. Raises
    ``SnapshotError`` when the data cannot be a snapshot.
    """
    w = _Walker(source, _budget)
    if isinstance(data, list):
        w.note("a bare segment list (memory_snapshot()), no trace")
        data = {"segments": data}
    if not isinstance(data, dict):
        raise SnapshotError(f"{source}: a snapshot is a dict with 'segments', got {type(data).__name__}")
    if "segments" not in data:
        raise SnapshotError(f"{source}: no 'segments' key; this is not a memory snapshot "
                            f"(keys: {', '.join(sorted(map(str, data))[:8]) or 'none'})")
    segments = data["segments"]
    if not isinstance(segments, list):
        raise SnapshotError(f"{source}: 'segments' is {type(segments).__name__}, expected a list")
    out = {k: v for k, v in data.items()}
    out["segments"] = [_segment(w, seg, i) for i, seg in enumerate(segments)]
    check_no_overlap(w, out["segments"])
    traces = data.get("device_traces", data.get("traces"))
    if traces is None:
        w.note("no 'device_traces' (recorded without history): nothing to replay")
        traces = []
    if not isinstance(traces, list):
        raise SnapshotError(f"{source}: 'device_traces' is {type(traces).__name__}, expected a list")
    out.pop("traces", None)
    out["device_traces"] = [_trace(w, t, d) for d, t in enumerate(traces)]
    if not isinstance(out.setdefault("allocator_settings", {}), dict):
        raise SnapshotError(f"{source}: 'allocator_settings' is not a dict")
    if "allocator_settings" not in data:
        w.note("no 'allocator_settings' (PyTorch < 2.4?): default settings assumed")
    if not isinstance(out.setdefault("external_annotations", []), list):
        raise SnapshotError(f"{source}: 'external_annotations' is not a list")
    read_host_entries(data, out, w.note)  # pinned host memory (2.14): malformed is a note
    notes = [t if n == 1 else f"{t} (x{n})" for t, n in w.notes.items()]
    return out, notes


_SEGMENT_DEFAULTS = (("device", 0), ("stream", 0), ("segment_pool_id", (0, 0)),
                     ("is_expandable", False), ("frames", []))


def _segment(w, seg, i):
    where = f"segment {i}"
    w.tick()
    if not isinstance(seg, dict):
        w.fail(where, f"is {type(seg).__name__}, expected a dict")
    seg = dict(seg)
    address = _int(w, seg, "address", where)
    blocks = seg.get("blocks")
    if not isinstance(blocks, list):
        w.fail(where, "missing 'blocks' list" if blocks is None else "'blocks' is not a list")
    w.tick(len(blocks))
    new_blocks, offset = [], address
    for j, b in enumerate(blocks):
        new_blocks.append(_block(w, b, f"{where}, block {j}", offset))
        offset += new_blocks[-1]["size"]
    seg["blocks"] = new_blocks
    total = offset - address
    if "total_size" not in seg:
        w.note("segment 'total_size' missing: summed from blocks")
        seg["total_size"] = total
    elif _int(w, seg, "total_size", where) != total and new_blocks:
        w.fail(where, f"blocks add up to {total} bytes but total_size is {seg['total_size']}")
    for key, states in (("allocated_size", ("active_allocated",)),
                        ("active_size", ("active_allocated", "active_pending_free"))):
        if key not in seg:
            w.note(f"segment {key!r} missing: computed from blocks")
            seg[key] = sum(b["size"] for b in new_blocks if b["state"] in states)
    if "requested_size" not in seg:
        w.note("segment 'requested_size' missing: computed from blocks")
        seg["requested_size"] = sum(b["requested_size"] for b in new_blocks if b["state"] != "inactive")
    for key, default in _SEGMENT_DEFAULTS:
        if key not in seg:
            w.note(f"segment {key!r} missing: {default!r} assumed")
            seg[key] = list(default) if isinstance(default, list) else default
    check_segment_types(w, seg, where)
    if "segment_type" not in seg:
        w.note("segment 'segment_type' missing: inferred from size")
        small = seg["total_size"] <= _SMALL_BUFFER_BYTES and not seg["is_expandable"]
        seg["segment_type"] = "small" if small else "large"
    seg["segment_pool_id"] = check_pool_id(w, seg["segment_pool_id"], where, "segment_pool_id")
    return seg


def _block(w, b, where, offset):
    if not isinstance(b, dict):
        w.fail(where, f"is {type(b).__name__}, expected a dict")
    b = dict(b)
    size = _int(w, b, "size", where)
    if size < 0:
        w.fail(where, f"negative size {size}")
    state = b.get("state")
    if state is None:
        w.fail(where, "missing 'state'")
    state = _STATE_ALIASES.get(state, state)
    if state not in BLOCK_STATES:
        w.fail(where, f"unknown state {state!r} (expected one of {', '.join(BLOCK_STATES)})")
    b["state"] = state
    if "address" not in b:
        b["address"] = offset
    elif _int(w, b, "address", where) != offset:
        w.fail(where, f"address {b['address']:#x} is not where the previous blocks end ({offset:#x})")
    history = b.pop("history", None)
    if history is not None:
        # PyTorch <= 2.0: history [{addr, real_size, frames}], newest last
        w.note("old (<= 2.0) 'history' blocks converted")
        last = history[-1] if isinstance(history, list) and history else {}
        if not isinstance(last, dict):
            w.fail(where, "malformed 'history'")
        b.setdefault("requested_size", last.get("real_size", size))
        b.setdefault("frames", last.get("frames", []) if state != "inactive" else [])
    if "requested_size" not in b:
        w.note("block 'requested_size' missing: block size assumed")
        b["requested_size"] = size if state != "inactive" else 0
    else:
        _int(w, b, "requested_size", where)
    if "frames" not in b:
        b["frames"] = []
    elif not isinstance(b["frames"], list):
        w.fail(where, "'frames' is not a list")
    return b


def _trace(w, entries, device):
    where = f"device_traces[{device}]"
    if not isinstance(entries, list):
        w.fail(where, f"is {type(entries).__name__}, expected a list")
    w.tick(len(entries))
    out = entries
    copied = False
    for k, e in enumerate(entries):
        if not isinstance(e, dict):
            w.fail(f"{where}[{k}]", f"is {type(e).__name__}, expected a dict")
        action = e.get("action")
        if not isinstance(action, str):
            w.fail(f"{where}[{k}]", "missing 'action'")
        addr_key = "device_free" if action == "oom" else "addr"
        for key in (addr_key, "size"):
            value = e.get(key)
            if isinstance(value, bool) or not isinstance(value, int):
                if action not in TRACE_ACTIONS:
                    break    # unknown actions pass through untouched, like _memory_viz does
                w.fail(f"{where}[{k}] ({action})",
                       f"missing {key!r}" if value is None else f"{key!r} is not an integer")
        new = trace_pool_id(w, e, where, k, action)
        if "stream" not in new or "time_us" not in new:
            new = dict(new, stream=new.get("stream", 0), time_us=new.get("time_us", 0))
            w.note("trace entries without 'stream'/'time_us': 0 assumed")
        if new is not e:
            if not copied:
                out, copied = list(entries), True
            out[k] = new
    return out


# ----------------------------------------------------------------------------- dumping

def dump_snapshot(snapshot, path, *, format: str | None = None) -> Path:
    """Write a snapshot so that PyTorch's own tools read it; returns the path written.

    ``snapshot`` is a snapshot dict, or anything with a ``snapshot()`` method (a device, a
    capture, a replay result's ``.snapshot``). The default format is a pickle, exactly what
    ``torch.cuda.memory._dump_snapshot`` writes (``python -m torch.cuda._memory_viz stats FILE``
    and pytorch.org/memory_viz read it); ``format="json"`` (or a ``.json`` suffix) writes JSON.
    The file is replaced atomically.
    """
    if not isinstance(snapshot, (dict, list)) and callable(getattr(snapshot, "snapshot", None)):
        snapshot = snapshot.snapshot()
    snapshot, _notes = normalize_snapshot(snapshot, source="dump_snapshot")
    path = Path(os.fspath(path))
    fmt = format or ("json" if path.suffix.lower() == ".json" else "pickle")
    if fmt == "pickle":
        payload = pickle.dumps(snapshot, protocol=pickle.DEFAULT_PROTOCOL)
    elif fmt == "json":
        payload = json.dumps(snapshot, separators=(",", ":")).encode("utf-8")
    else:
        raise ValueError(f"format must be 'pickle' or 'json', not {format!r}")
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes 0600; a dump should look like open()'s
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
