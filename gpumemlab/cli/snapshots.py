"""``gpumemlab report | verify | replay``: read a memory snapshot file from the command line.

* ``report SNAPSHOT [--png FILE]``: memory summary, block map, fragmentation figures and the
  largest live allocations with their frames.
* ``verify SNAPSHOT``: replay every device trace under the recorded settings; exit 0 only when
  every allocation address (and segment release) was reproduced on every device
  (docs/REPLAY.md). ``--device N`` replays one.
* ``replay SNAPSHOT --alloc-conf STR [--total-memory SIZE]``: what-if table, recorded settings
  first, then each alternative.

Every problem with the input is one line (``CLIError``), never a traceback.
"""
from __future__ import annotations

import sys
import warnings

from gpumemlab.cli import CLIError
from gpumemlab.cli.output import raw_stream
from gpumemlab.recordings.files import SnapshotError, SnapshotWarning, load_snapshot
from gpumemlab.recordings.replay import ReplayError, replay, replay_devices
from gpumemlab.units import format_size
from gpumemlab.viz.blockmap import show
from gpumemlab.viz.frames import frame_text
from gpumemlab.viz.metrics import fragmentation
from gpumemlab.viz.text import text_blockmap


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="summarise a memory snapshot file",
                              description="Memory summary, block map, fragmentation figures and the "
                                          "largest live allocations of a snapshot file.")
    p.add_argument("snapshot", help="pickle from torch.cuda.memory._dump_snapshot, or JSON")
    p.add_argument("--png", metavar="FILE", help="also draw the block map into this PNG")
    p.add_argument("--top", type=int, default=10, help="live allocations to list (default 10)")
    p.add_argument("--range", metavar="START:END", help="also report trace entries START to END "
                                                        "(of the first device with a trace)")
    p.set_defaults(func=cmd_report)

    p = subparsers.add_parser("verify", help="replay a recording and check every address",
                              description="Replay a snapshot's history on the allocator model "
                                          "under the recorded settings; exit status 0 only when "
                                          "every allocation address is reproduced.")
    p.add_argument("snapshot")
    p.add_argument("--device", type=int, default=None,
                   help="replay only this device's trace (default: every device with a trace)")
    p.set_defaults(func=cmd_verify)

    p = subparsers.add_parser("replay", help="what-if: replay under other allocator settings",
                              description="Replay a recording under the recorded settings and "
                                          "each --alloc-conf, side by side.")
    p.add_argument("snapshot")
    p.add_argument("--alloc-conf", action="append", default=[], metavar="STR",
                   help="a PYTORCH_CUDA_ALLOC_CONF string (repeatable)")
    p.add_argument("--total-memory", action="append", default=[], metavar="SIZE",
                   help="device capacity, e.g. 80GiB (repeatable; default: the recording's)")
    p.add_argument("--device", type=int, default=None)
    p.set_defaults(func=cmd_replay)


# ----------------------------------------------------------------------------- helpers

def _load(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SnapshotWarning)
        try:
            snap = load_snapshot(path)
        except SnapshotError as exc:
            raise CLIError(str(exc)) from None
    for w in caught:
        print(f"note: {w.message}", file=sys.stderr)
    return snap


def _size(n) -> str:
    return format_size(int(n))


def _progress(label):
    """A progress line on stderr for long replays (only when stderr is a terminal)."""
    if not sys.stderr.isatty():
        return None

    err = raw_stream(sys.stderr)     # the kit's own \r, past the cleaning writer

    def show(done, total):
        pct = 100.0 * done / total if total else 100.0
        end = "\n" if done >= total else ""
        print(f"\r{label}: {done}/{total} entries ({pct:5.1f}%)", end=end, file=err, flush=True)
    return show


def _replay(snap, label, path, **kw):
    try:
        return replay(snap, progress=_progress(label), **kw)
    except ReplayError as exc:
        msg = str(exc)
        if msg.startswith("snapshot: "):      # name the file, not the in-memory dict
            msg = f"{path}: {msg[len('snapshot: '):]}"
        raise CLIError(msg) from None
    except ValueError as exc:       # e.g. a bad --total-memory
        raise CLIError(str(exc)) from None


def _fragmentation(snap, total_memory=None):
    try:
        return fragmentation(snap, total_memory=total_memory)
    except Exception:               # metrics are a view: never fail the command over them
        return None


# ----------------------------------------------------------------------------- report

def cmd_report(args) -> int:
    snap = _load(args.snapshot)
    segments = snap["segments"]
    out = []
    reserved = sum(s["total_size"] for s in segments)
    allocated = sum(s["allocated_size"] for s in segments)
    requested = sum(s["requested_size"] for s in segments)
    traces = snap["device_traces"]
    out.append(f"{args.snapshot}")
    out.append(f"  segments: {len(segments)} ({sum(s['segment_type'] == 'small' for s in segments)} "
               f"small, {sum(s['segment_type'] == 'large' for s in segments)} large, "
               f"{sum(bool(s['is_expandable']) for s in segments)} expandable)")
    out.append(f"  reserved {_size(reserved)}, allocated {_size(allocated)}, "
               f"requested {_size(requested)}, cached free {_size(reserved - allocated)}")
    out.append(f"  trace entries: {', '.join(str(len(t)) for t in traces) or 'none (no history)'}")
    settings = snap.get("allocator_settings") or {}
    out.append(f"  allocator settings: {settings.get('PYTORCH_CUDA_ALLOC_CONF') or 'default'}")
    frag = _fragmentation(snap)
    if frag is not None:
        out.append("")
        out.append(str(frag))
    out.append("")
    out.append(_blockmap_text(snap))
    out.append("")
    out.append(f"largest live allocations (top {args.top}):")
    live = [(b["size"], b["requested_size"], b["address"], b.get("frames") or [])
            for s in segments for b in s["blocks"] if b["state"] == "active_allocated"]
    live.sort(key=lambda t: (-t[0], t[2]))
    for size, req, addr, frames in live[: args.top]:
        where = frame_text(frames)      # the user's code, not PyTorch's own frames
        out.append(f"  {_size(size):>12}  requested {req:>12}  at {addr:#x}  {where}")
    if not live:
        out.append("  (none)")
    if args.range:
        out.append("")
        out.extend(_range_report(snap, args.snapshot, args.range, args.top))
    print("\n".join(out))
    if args.png:
        _png(snap, args.png)
    return 0


def _parse_range(text, n):
    try:
        a, b = (part.strip() for part in text.split(":"))
        start = int(a) if a else 0
        end = int(b) if b else n
    except ValueError:
        raise CLIError(f"--range {text!r}: expected START:END, e.g. 1000:2000") from None
    if not 0 <= start < end:
        raise CLIError(f"--range {text!r}: START must be >= 0 and less than END")
    return start, min(end, n)


def _range_report(snap, path, text, top):
    """Entries START..END of a huge trace: what happened, the peaks, the biggest allocations."""
    devices = replay_devices(snap)
    if not devices:
        raise CLIError(f"{path}: --range needs a trace (this snapshot has none)")
    trace = snap["device_traces"][devices[0]]
    start, end = _parse_range(text, len(trace))
    if start >= len(trace):
        raise CLIError(f"--range {text!r}: the trace has {len(trace)} entries")
    part = trace[start:end]
    counts = {}
    for e in part:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    out = [f"trace entries {start}:{end} of {len(trace)} (device {devices[0]}): "
           + ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))]
    result = _replay(snap, "range", path, device=devices[0], stop_at=end, stop_on_oom=False)
    rows = range(start, min(end, len(result.timeline)))
    if rows:
        peak_r = max(result.timeline.reserved[i] for i in rows)
        peak_a = max(result.timeline.allocated[i] for i in rows)
        out.append(f"  in the range (replayed): peak reserved {_size(peak_r)}, peak allocated "
                   f"{_size(peak_a)}; at entry {end - 1}: reserved "
                   f"{_size(result.timeline.reserved[rows[-1]])}, allocated "
                   f"{_size(result.timeline.allocated[rows[-1]])}")
    allocs = sorted(((e["size"], start + k, e) for k, e in enumerate(part) if e["action"] == "alloc"),
                    key=lambda t: (-t[0], t[1]))
    out.append(f"  largest allocations made in the range (top {top}):")
    for size, index, e in allocs[:top]:
        out.append(f"  {_size(size):>12}  entry {index:>8}  at {e['addr']:#x}  "
                   f"{frame_text(e.get('frames'))}")
    if not allocs:
        out.append("  (none)")
    return out


def _blockmap_text(snap) -> str:
    return text_blockmap(snap)


def _png(snap, path) -> None:
    import matplotlib   # heavy: only --png pays for it
    matplotlib.use("Agg")
    fig = show(snap)
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise CLIError(f"{path}: cannot write ({exc.strerror or exc})") from None
    print(f"block map written to {path}")


# ----------------------------------------------------------------------------- verify

def cmd_verify(args) -> int:
    snap = _load(args.snapshot)
    devices = [args.device] if args.device is not None else (replay_devices(snap) or [None])
    ok = True
    for device in devices:
        ok = _verify_device(snap, args.snapshot, device, len(devices) > 1) and ok
    if len(devices) > 1:
        print("verified: every device reproduced" if ok else "NOT verified")
    return 0 if ok else 1


def _verify_device(snap, path, device, several) -> bool:
    label = "verify" if device is None else f"verify device {device}"
    # a recorded OOM is part of the run: replay past it (one the model adds is a mismatch)
    result = _replay(snap, label, path, device=device, stop_on_oom=False)
    done = result.allocations - result.alloc_mismatches
    where = f"{path} (device {result.device})" if several else path
    print(f"{where}: {result.replayed} of {result.entries} trace entries replayed under "
          f"{result.recorded_alloc_conf or 'default settings'}")
    print(f"  allocation addresses reproduced: {done} of {result.allocations}"
          f" ({result.alloc_mismatches} mismatches)")
    if result.segment_mismatches:
        print(f"  segment releases not reproduced: {result.segment_mismatches}")
    if result.start_problems:
        print(f"  start state: {len(result.start_problems)} problems, first: "
              f"{result.start_problems[0]}")
    for note in result.notes:
        print(f"  note: {note}")
    if result.oom_mismatches:
        print(f"  recorded OOMs the model did not run into: {result.oom_mismatches}")
    if result.oom is not None:
        recorded = result.oom["entry"]["action"] == "oom"
        print(f"  the model ran out of memory at entry {result.oom['index']}"
              f"{' (as recorded)' if recorded else ''}")
    if result.allocations == 0:
        # an empty trace reproduces trivially: say that nothing was checked instead
        print(f"  nothing checked: the trace of device {result.device} holds no allocation "
              f"({result.entries} entries)")
        if not several:
            print("NOT verified: nothing to verify")
        return False
    ok = result.reproduced and result.replayed == result.entries
    if not several:
        print("verified: every allocation address reproduced" if ok else "NOT verified")
    else:
        print(f"  device {result.device}: {'reproduced' if ok else 'NOT reproduced'}")
    return ok


# ----------------------------------------------------------------------------- replay

def cmd_replay(args) -> int:
    snap = _load(args.snapshot)
    confs = [None] + list(args.alloc_conf)
    totals = list(args.total_memory) or [None]
    rows = []
    for total in totals:
        for conf in confs:
            label = "recorded" if conf is None else conf
            r = _replay(snap, label, args.snapshot, alloc_conf=conf, total_memory=total, device=args.device)
            frag = _fragmentation(r.snapshot, total_memory=r.total_memory)
            ext = "-" if frag is None else f"{frag['external_fragmentation']:.2f}"
            rows.append((label + ("" if conf is None else ""), _size(r.total_memory),
                         _size(r.peak_reserved), _size(r.peak_allocated),
                         _size(r.peak_reserved - r.peak_allocated), ext,
                         "yes" if r.oom else "no",
                         "-" if r.oom is None else str(r.oom["index"])))
    head = ("settings", "capacity", "peak reserved", "peak allocated", "reserved-allocated",
            "ext. frag (end)", "OOM", "at entry")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return 0
