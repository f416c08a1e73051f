"""Why memory grows step after step: ``gml.growth(recording)`` names a cause for each iteration.

The recording (a ``gml.capture`` of torch code, a ``torch.cuda.memory._snapshot()`` dict or
file, a ``SimulatedGPU``) is replayed on the allocator model (``gml.replay``), which gives the
allocated and reserved bytes after every trace entry. Iterations are the runs of trace entries
that carry the same ``user_metadata``: what ``torch.cuda.memory._set_memory_metadata(f"step
{i}")`` (``Capture.set_memory_metadata``, ``SimulatedGPU.set_memory_metadata``) stamps on every
entry recorded after it; or ``iterations=[start index, ...]``; without marks (or with
``iterations="auto"``) they are found from the allocation sites that recur once per step
(``growth.iterations``), and the report says how and how sure (``GrowthReport.found``). Each
iteration gets one cause,
the first that holds, in this order:

* ``leak``: bytes this iteration allocated *stay*: they are still alive when the last
  iteration ends (for the last iteration itself: alive at its end and allocated by frames
  where earlier iterations left bytes that stay), and the same allocating frames leave bytes
  that stay in more than one iteration.
* ``one-time state``: bytes stay, but only this iteration leaves bytes at those frames
  (optimizer state made by the first ``step()``, gradients kept by
  ``zero_grad(set_to_none=False)``).
* ``new shapes``: reserved memory grew, and an allocation that made it grow (a *trigger*: the
  model had to cudaMalloc) asked for a rounded size never allocated before in the recording.
* ``higher peak``: reserved memory grew, every trigger's size had been allocated before, and
  more was allocated at once than in any earlier iteration (the last step's loop variables,
  alive while this step makes its own, are the usual reason in a second step).
* ``fragmentation``: reserved memory grew, every trigger's size had been allocated before, and
  the iteration never had more allocated at once than an earlier one had: the cache held
  enough memory, in pieces that did not fit.
* ``steady``: none of these.

Loop variables alive at an iteration's end and freed in the next (``out = model(x)``) do not
stay; bytes that outlive the next iteration but are freed before the last ends (a bounded
history) are listed as *carried*, not as a cause. The evidence is the allocating frames of the
bytes that stay and of the triggers (``Site``, ``Trigger``), with sizes, categories and, for
bytes that stay, the frames that freed them later. Not seen: growth outside the allocator (the
CUDA context, library workspaces), bytes that first stay in the last iteration, and a leak
whose bytes are freed before the last iteration ends (they read as carried).
"""
from __future__ import annotations

import re

from gpumemlab.allocator import round_size
from gpumemlab.recordings.source import read_snapshot
from gpumemlab.recordings.replay import replay
from gpumemlab.recordings.replay.prepare import replay_devices
from .iterations import find_iterations
from .result import CAUSES, GrowthReport, Iteration, Site, Trigger, where

__all__ = ["growth", "iteration_spans", "GrowthError", "CAUSES"]


class GrowthError(ValueError):
    """The recording cannot be read as iterations (no marks, bad ``iterations``)."""


def growth(recording, *, iterations=None, alloc_conf=None, total_memory=None,
           device=None) -> GrowthReport:
    """Name the cause of memory growth in each iteration of ``recording``.

    Args:
        recording: a ``Capture``, a snapshot dict or file with history, or a device with
            ``snapshot()``.
        iterations: None (the entries' ``user_metadata``; found from the allocation sites
            when there is none), ``"auto"`` (found from the sites even with marks), or the
            trace index at which each iteration starts, increasing.
        alloc_conf, total_memory: replay under these settings (a what-if) instead of as
            recorded; a capture is always replayed with model-chosen addresses.
        device: which device's trace (default: the first with one).
    """
    trace, source = _trace_of(recording, device)
    spans, found = _spans_found(trace, iterations)
    result = replay(source, alloc_conf=alloc_conf, total_memory=total_memory, device=device,
                    stop_on_oom=False)
    report = _classify(trace, spans, result)
    report.found = found
    return report


def _spans_found(trace, iterations):
    """The spans and how they were found (``GrowthReport.found``)."""
    found = {"method": None, "iterations": 0, "anchor_index": None, "anchor_where": None,
             "confidence": None, "level": None, "explanation": ""}
    if iterations is None and any(e.get("user_metadata") for e in trace):
        spans = iteration_spans(trace)
        found.update(method="marks", confidence=1.0, level="high",
                     explanation="marked by set_memory_metadata (user_metadata on each entry)")
    elif iterations is None or (isinstance(iterations, str) and iterations == "auto"):
        starts, info = find_iterations(trace, _site_key)
        if not starts:
            raise GrowthError("no iteration marks in the trace and no allocation site recurs, "
                              "so no iterations could be found: call set_memory_metadata("
                              "f'step {i}') at the top of each step (torch.cuda.memory."
                              "_set_memory_metadata on a GPU), or pass iterations=[start, ...]")
        spans = iteration_spans(trace, starts)
        # nothing marks where the last one ends: as long as the median of the others (what
        # follows, such as the frees after the loop, is in no iteration)
        lengths = sorted(e - s for _n, s, e in spans[:-1])
        name, s, e = spans[-1]
        spans[-1] = (name, s, min(e, s + lengths[len(lengths) // 2]))
        anchor = trace[info["anchor_index"]]
        at = where(anchor.get("frames") or [])
        found.update(method="auto", anchor_index=info["anchor_index"], anchor_where=at,
                     confidence=info["confidence"], level=info["level"],
                     explanation=f"found without marks: each iteration begins with an "
                                 f"allocation at {at}, the allocation site that best splits "
                                 f"the trace into alike steps ({info['candidates']} recurring "
                                 f"sites tried); the iterations agree on "
                                 f"{info['confidence']:.0%} of their allocations by site "
                                 f"({info['level']} confidence); the last is taken to be "
                                 f"as long as the median one")
    else:
        spans = iteration_spans(trace, iterations)
        found.update(method="given", confidence=1.0, level="high",
                     explanation="given as iterations=[start, ...]")
    found["iterations"] = len(spans)
    return spans, found


def _trace_of(recording, device):
    if getattr(recording, "is_capture", False):
        return recording.trace, recording
    try:
        source = read_snapshot(recording, name="growth source")
    except TypeError:
        raise GrowthError(f"growth needs a capture, a snapshot (dict or file) or a device, "
                          f"not {type(recording).__name__}") from None
    snap = source.snapshot
    devices = replay_devices(snap)
    d = devices[0] if (device is None and devices) else device
    if d is None or d not in devices:
        raise GrowthError("the snapshot has no trace to read iterations from (record it with "
                          "torch.cuda.memory._record_memory_history(enabled='all'))")
    return snap["device_traces"][d], source


def iteration_spans(trace, iterations=None) -> list:
    """``[(name, start, end), ...]``: trace index ranges [start, end) of the iterations."""
    n = len(trace)
    if iterations is None:
        spans = []
        for i, e in enumerate(trace):
            tag = e.get("user_metadata") or ""
            if not tag:
                continue
            if spans and spans[-1][0] == tag and spans[-1][2] == i:
                spans[-1][2] = i + 1
            else:
                spans.append([tag, i, i + 1])
        if not spans:
            raise GrowthError("no iteration marks in the trace: call set_memory_metadata("
                              "f'step {i}') at the top of each step (torch.cuda.memory."
                              "_set_memory_metadata on a GPU), or pass iterations=[start, ...]")
        return [tuple(s) for s in spans]
    try:
        starts = [int(s) for s in iterations]
    except (TypeError, ValueError):
        raise GrowthError("iterations must be a list of trace indices, like [0, 120, 240]") \
            from None
    if not starts or any(b <= a for a, b in zip(starts, starts[1:])) or starts[0] < 0 \
            or starts[-1] >= n:
        raise GrowthError(f"iterations must be increasing trace indices from 0 to {n - 1}, "
                          f"got {starts[:6]}{'...' if len(starts) > 6 else ''}")
    ends = starts[1:] + [n]
    return [(f"iteration {k}", s, e) for k, (s, e) in enumerate(zip(starts, ends))]


_CELL = re.compile(r"<ipython-input-\d+-([0-9a-f]+)>")


def _site_key(entry):
    frames = entry.get("frames") or []
    if not frames:
        return ("size", entry["size"])   # no frames recorded: the size is all we know
    # an IPython cell's file name carries its execution count: the same code is the same site
    return tuple((_CELL.sub(r"<cell \1>", f.get("filename", "?")), f.get("line", 0),
                  f.get("name", "?")) for f in frames)


def _lifetimes(trace):
    """alloc index -> (free_completed index, free_requested index); never freed: absent."""
    open_, requested, out = {}, {}, {}
    for i, e in enumerate(trace):
        a = e["action"]
        if a == "alloc":
            open_[e["addr"]] = i
        elif a == "free_requested":
            requested[e["addr"]] = i
        elif a == "free_completed":
            j = open_.pop(e["addr"], None)
            if j is not None:
                out[j] = (i, requested.pop(e["addr"], i))
    return out


def _classify(trace, spans, result):
    tl = result.timeline
    n_done = len(tl)
    life = _lifetimes(trace)
    never = (len(trace) + 1, None)

    def figures(i):
        if i < 0:
            return tl.start["allocated_bytes"], tl.start["reserved_bytes"]
        i = min(i, n_done - 1)
        return tl.allocated[i], tl.reserved[i]

    # 1. what each iteration kept: alive at the end of the last iteration ("stays"), or past
    # the end of the next one but freed before the last ends ("carried")
    last = len(spans) - 1
    final = spans[last][2]
    stays, carried = [], []
    for k, (_name, s, e) in enumerate(spans):
        horizon = spans[k + 1][2] if k < last else e
        survivors = [j for j in range(s, e) if trace[j]["action"] == "alloc"
                     and life.get(j, never)[0] >= horizon]
        stays.append([j for j in survivors if life.get(j, never)[0] >= final])
        carried.append([j for j in survivors if life.get(j, never)[0] < final])
    site_iters = {}
    for k, js in enumerate(stays[:-1]):
        for j in js:
            site_iters.setdefault(_site_key(trace[j]), set()).add(k)
    # the last iteration's own loop variables are alive at its end too: count only what stays
    # where earlier iterations left bytes that stayed
    stays[last] = [j for j in stays[last] if _site_key(trace[j]) in site_iters]
    for j in stays[last]:
        site_iters[_site_key(trace[j])].add(last)

    # 2. per iteration: figures, triggers of reserved growth, cause
    seen = {}                                # rounded size -> first alloc index
    scanned = 0
    out = []
    for k, (name, s, e) in enumerate(spans):
        for j in range(scanned, s):
            if trace[j]["action"] == "alloc":
                seen.setdefault(round_size(trace[j]["size"]), j)
        a0, r0 = figures(s - 1)
        a1, r1 = figures(e - 1)
        window = range(s, min(e, n_done))
        peak_alloc = max((tl.allocated[j] for j in window), default=a1)
        triggers = []
        for j in window:
            if trace[j]["action"] != "alloc":
                continue
            before = figures(j - 1)[1]
            if tl.reserved[j] > before:
                rs = round_size(trace[j]["size"])
                triggers.append(Trigger(index=j, size=trace[j]["size"], rounded_size=rs,
                                        reserved_growth_bytes=tl.reserved[j] - before,
                                        seen_at=seen.get(rs), frames=trace[j].get("frames") or [],
                                        category=trace[j].get("category")))
        for j in range(s, e):
            if trace[j]["action"] == "alloc":
                seen.setdefault(round_size(trace[j]["size"]), j)
        scanned = e
        sites = _group_sites(trace, stays[k], life, spans, site_iters)
        held = _group_sites(trace, carried[k], life, spans, {})
        earlier_peak = max((it.peak_allocated_bytes for it in out), default=0)
        it = Iteration(name=name, number=k, start=s, end=e, allocated_bytes=a1, reserved_bytes=r1,
                       allocated_growth_bytes=a1 - a0, reserved_growth_bytes=r1 - r0,
                       peak_allocated_bytes=peak_alloc, earlier_peak_allocated_bytes=earlier_peak,
                       kept=sites, carried=held, triggers=triggers, cause="steady")
        it.cause = _cause(it)
        out.append(it)
    notes = list(result.notes)
    if result.oom is not None:
        notes.append(f"the replay ran out of memory at trace entry {result.oom['index']}")
    return GrowthReport(out, result=result, notes=notes)


def _group_sites(trace, js, life, spans, site_iters):
    groups = {}
    for j in js:
        key = _site_key(trace[j])
        groups.setdefault(key, []).append(j)
    names = [s[0] for s in spans]
    sites = []
    for key, members in groups.items():
        e0 = trace[members[0]]
        freed = [life[j][0] if j in life else None for j in members]
        freed_by = next((trace[life[j][1]].get("frames") or [] for j in members if j in life), [])
        cats = [trace[j].get("category") for j in members]
        sites.append(Site(frames=e0.get("frames") or [], count=len(members),
                          bytes=sum(trace[j]["size"] for j in members),
                          sizes=sorted({trace[j]["size"] for j in members}),
                          category=max(set(cats), key=cats.count), indices=members, freed_at=freed,
                          freed_by=freed_by,
                          iterations=[names[k] for k in sorted(site_iters.get(key, ()))]))
    sites.sort(key=lambda site: -site.bytes)
    return sites


def _cause(it) -> str:
    if it.kept:
        if any(len(site.iterations) > 1 for site in it.kept):
            return "leak"
        return "one-time state"
    if it.reserved_growth_bytes > 0 and it.triggers:
        if any(t.seen_at is None for t in it.triggers):
            return "new shapes"
        if it.peak_allocated_bytes > it.earlier_peak_allocated_bytes:
            return "higher peak"
        return "fragmentation"
    return "steady"

