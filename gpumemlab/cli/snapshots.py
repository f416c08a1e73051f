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

import json
import sys
import warnings

from gpumemlab.cli import CLIError
from gpumemlab.cli.output import raw_stream
from gpumemlab.recordings.files import SnapshotError, SnapshotWarning, load_snapshot
from gpumemlab.recordings.replay import ReplayError, replay, replay_devices
from gpumemlab.units import format_size
from gpumemlab.viz.blockmap import show
from gpumemlab.viz.frames import frame_text
from gpumemlab.viz.host_view import host_facts, host_line
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
    p.add_argument("--json", action="store_true", help="print the figures as JSON (no block map)")
    p.set_defaults(func=cmd_report)

    p = subparsers.add_parser("verify", help="replay a recording and check every address",
                              description="Replay a snapshot's history on the allocator model "
                                          "under the recorded settings; exit status 0 only when "
                                          "every allocation address is reproduced.")
    p.add_argument("snapshot")
    p.add_argument("--device", type=int, default=None,
                   help="replay only this device's trace (default: every device with a trace)")
    p.add_argument("--json", action="store_true", help="print each device's result as JSON")
    p.add_argument("--host", action="store_true",
                   help="replay the pinned host trace (host_traces, torch 2.14's "
                        "record_pinned_host_memory=True) instead")
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
    p.add_argument("--json", action="store_true", help="print the table's rows as JSON (bytes)")
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
    facts = _report_facts(snap, args)
    if args.json:
        print(json.dumps(facts, indent=1))
    else:
        print(_report_text(facts, snap))
    if args.png:
        _png(snap, args.png, sys.stderr if args.json else sys.stdout)
    return 0


def _report_facts(snap, args) -> dict:
    """Everything ``report`` says, as numbers (the JSON; the text is made from it)."""
    segments = snap["segments"]
    reserved = sum(s["total_size"] for s in segments)
    allocated = sum(s["allocated_size"] for s in segments)
    settings = snap.get("allocator_settings") or {}
    frag = _fragmentation(snap)
    live = [(b["size"], b["requested_size"], b["address"], b.get("frames") or [])
            for s in segments for b in s["blocks"] if b["state"] == "active_allocated"]
    live.sort(key=lambda t: (-t[0], t[2]))
    facts = {
        "snapshot": args.snapshot, "top": args.top,
        "segments": {"total": len(segments),
                     "small": sum(s["segment_type"] == "small" for s in segments),
                     "large": sum(s["segment_type"] == "large" for s in segments),
                     "expandable": sum(bool(s["is_expandable"]) for s in segments)},
        "reserved_bytes": reserved, "allocated_bytes": allocated,
        "requested_bytes": sum(s["requested_size"] for s in segments),
        "cached_free_bytes": reserved - allocated,
        "trace_entries": [len(t) for t in snap["device_traces"]],
        "alloc_conf": settings.get("PYTORCH_CUDA_ALLOC_CONF") or "",
        "fragmentation": None if frag is None else frag.as_dict(),
        # the user's code, not PyTorch's own frames
        "largest_live": [{"size": size, "requested_size": req, "address": addr,
                          "frame": frame_text(frames)}
                         for size, req, addr, frames in live[: args.top]],
    }
    if "host_segments" in snap:
        facts["host"] = host_facts(snap)
    if args.range:
        facts["range"] = _range_facts(snap, args.snapshot, args.range, args.top)
    return facts


def _report_text(f, snap) -> str:
    seg = f["segments"]
    out = [f["snapshot"],
           f"  segments: {seg['total']} ({seg['small']} small, {seg['large']} large, "
           f"{seg['expandable']} expandable)",
           f"  reserved {_size(f['reserved_bytes'])}, allocated {_size(f['allocated_bytes'])}, "
           f"requested {_size(f['requested_bytes'])}, cached free {_size(f['cached_free_bytes'])}",
           f"  trace entries: {', '.join(map(str, f['trace_entries'])) or 'none (no history)'}",
           f"  allocator settings: {f['alloc_conf'] or 'default'}"]
    if "host" in f:
        out.append("  " + host_line(f["host"]))
    frag = _fragmentation(snap) if f["fragmentation"] is not None else None
    if frag is not None:
        out += ["", str(frag)]
    out += ["", _blockmap_text(snap), "",
            f"largest live allocations (top {f['top']}):"]
    for b in f["largest_live"]:
        out.append(f"  {_size(b['size']):>12}  requested {b['requested_size']:>12}  at "
                   f"{b['address']:#x}  {b['frame']}")
    if not f["largest_live"]:
        out.append("  (none)")
    if "range" in f:
        out += ["", *_range_text(f["range"])]
    return "\n".join(out)


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


def _range_facts(snap, path, text, top) -> dict:
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
    facts = {"start": start, "end": end, "trace_entries": len(trace), "device": devices[0],
             "actions": dict(sorted(counts.items())), "replayed": None}
    result = _replay(snap, "range", path, device=devices[0], stop_at=end, stop_on_oom=False)
    rows = range(start, min(end, len(result.timeline)))
    if rows:
        tl = result.timeline
        facts["replayed"] = {"peak_reserved_bytes": max(tl.reserved[i] for i in rows),
                             "peak_allocated_bytes": max(tl.allocated[i] for i in rows),
                             "last_entry": rows[-1], "reserved_bytes": tl.reserved[rows[-1]],
                             "allocated_bytes": tl.allocated[rows[-1]]}
    allocs = sorted(((e["size"], start + k, e) for k, e in enumerate(part) if e["action"] == "alloc"),
                    key=lambda t: (-t[0], t[1]))
    facts["largest_allocations"] = [{"size": size, "entry": index, "address": e["addr"],
                                     "frame": frame_text(e.get("frames"))}
                                    for size, index, e in allocs[:top]]
    facts["top"] = top
    return facts


def _range_text(f) -> list:
    out = [f"trace entries {f['start']}:{f['end']} of {f['trace_entries']} (device "
           f"{f['device']}): " + ", ".join(f"{n} {a}" for a, n in f["actions"].items())]
    r = f["replayed"]
    if r is not None:
        out.append(f"  in the range (replayed): peak reserved {_size(r['peak_reserved_bytes'])}, "
                   f"peak allocated {_size(r['peak_allocated_bytes'])}; at entry "
                   f"{f['end'] - 1}: reserved {_size(r['reserved_bytes'])}, allocated "
                   f"{_size(r['allocated_bytes'])}")
    out.append(f"  largest allocations made in the range (top {f['top']}):")
    for a in f["largest_allocations"]:
        out.append(f"  {_size(a['size']):>12}  entry {a['entry']:>8}  at {a['address']:#x}  "
                   f"{a['frame']}")
    if not f["largest_allocations"]:
        out.append("  (none)")
    return out


def _blockmap_text(snap) -> str:
    return text_blockmap(snap)


def _png(snap, path, say) -> None:
    import matplotlib   # heavy: only --png pays for it
    matplotlib.use("Agg")
    fig = show(snap)
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise CLIError(f"{path}: cannot write ({exc.strerror or exc})") from None
    print(f"block map written to {path}", file=say)


# ----------------------------------------------------------------------------- verify

def cmd_verify(args) -> int:
    snap = _load(args.snapshot)
    if args.host:
        if args.device is not None:
            raise CLIError("--device picks a device's trace; --host replays the host trace")
        from gpumemlab.cli.host_verify import verify_host
        return verify_host(snap, args.snapshot, args.json)
    devices = [args.device] if args.device is not None else (replay_devices(snap) or [None])
    several = len(devices) > 1
    checked = [_verify_device(snap, args.snapshot, device) for device in devices]
    ok = all(f["verified"] for f in checked)
    if args.json:
        print(json.dumps({"snapshot": args.snapshot, "verified": ok, "devices": checked},
                         indent=1))
        return 0 if ok else 1
    for f in checked:
        print("\n".join(_verify_text(f, args.snapshot, several)))
    if several:
        print("verified: every device reproduced" if ok else "NOT verified")
    return 0 if ok else 1


def _verify_device(snap, path, device) -> dict:
    label = "verify" if device is None else f"verify device {device}"
    # a recorded OOM is part of the run: replay past it (one the model adds is a mismatch)
    r = _replay(snap, label, path, device=device, stop_on_oom=False)
    oom = None if r.oom is None else {"entry": r.oom["index"],
                                      "recorded": r.oom["entry"]["action"] == "oom"}
    # an empty trace reproduces trivially: nothing was checked, so it is not verified
    ok = r.allocations > 0 and r.reproduced and r.replayed == r.entries
    return {"device": r.device, "entries": r.entries, "replayed": r.replayed,
            "alloc_conf": r.recorded_alloc_conf, "allocations": r.allocations,
            "alloc_mismatches": r.alloc_mismatches, "segment_mismatches": r.segment_mismatches,
            "oom_mismatches": r.oom_mismatches, "start_problems": list(r.start_problems),
            "notes": list(r.notes), "oom": oom, "verified": ok}


def _verify_text(f, path, several) -> list:
    where = f"{path} (device {f['device']})" if several else path
    out = [f"{where}: {f['replayed']} of {f['entries']} trace entries replayed under "
           f"{f['alloc_conf'] or 'default settings'}",
           f"  allocation addresses reproduced: {f['allocations'] - f['alloc_mismatches']} of "
           f"{f['allocations']} ({f['alloc_mismatches']} mismatches)"]
    if f["segment_mismatches"]:
        out.append(f"  segment releases not reproduced: {f['segment_mismatches']}")
    if f["start_problems"]:
        out.append(f"  start state: {len(f['start_problems'])} problems, first: "
                   f"{f['start_problems'][0]}")
    out += [f"  note: {note}" for note in f["notes"]]
    if f["oom_mismatches"]:
        out.append(f"  recorded OOMs the model did not run into: {f['oom_mismatches']}")
    if f["oom"] is not None:
        out.append(f"  the model ran out of memory at entry {f['oom']['entry']}"
                   f"{' (as recorded)' if f['oom']['recorded'] else ''}")
    if f["allocations"] == 0:
        out.append(f"  nothing checked: the trace of device {f['device']} holds no allocation "
                   f"({f['entries']} entries)")
        if not several:
            out.append("NOT verified: nothing to verify")
        return out
    if not several:
        out.append("verified: every allocation address reproduced" if f["verified"]
                   else "NOT verified")
    else:
        out.append(f"  device {f['device']}: {'reproduced' if f['verified'] else 'NOT reproduced'}")
    return out


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
            rows.append({"settings": label, "alloc_conf": r.alloc_conf,
                         "total_memory_bytes": r.total_memory,
                         "peak_reserved_bytes": r.peak_reserved,
                         "peak_allocated_bytes": r.peak_allocated,
                         "external_fragmentation_end": None if frag is None
                         else frag["external_fragmentation"],
                         "oom_entry": None if r.oom is None else r.oom["index"]})
    if args.json:
        print(json.dumps({"snapshot": args.snapshot, "runs": rows}, indent=1))
        return 0
    head = ("settings", "capacity", "peak reserved", "peak allocated", "reserved-allocated",
            "ext. frag (end)", "OOM", "at entry")
    cells = [(r["settings"], _size(r["total_memory_bytes"]), _size(r["peak_reserved_bytes"]),
              _size(r["peak_allocated_bytes"]),
              _size(r["peak_reserved_bytes"] - r["peak_allocated_bytes"]),
              "-" if r["external_fragmentation_end"] is None
              else f"{r['external_fragmentation_end']:.2f}",
              "no" if r["oom_entry"] is None else "yes",
              "-" if r["oom_entry"] is None else str(r["oom_entry"])) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))
    return 0
