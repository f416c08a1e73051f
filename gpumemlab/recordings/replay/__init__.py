"""Replay a recorded allocation trace on the allocator model, as recorded or under other settings.

The method is described in docs/REPLAY.md. The source is a snapshot with history (a dict, or a file that
``load_snapshot`` reads: ``torch.cuda.memory._dump_snapshot`` output) or a ``Capture``.

* **Faithful replay** (``alloc_conf=None``, a snapshot): the start state is rebuilt
  (``replay.start``), each recorded ``segment_alloc`` dictates the address of the model's next
  cudaMalloc (``driver.reserve_next_address``), the first ``segment_map`` before an ``alloc``
  dictates the base of a new expandable segment's reservation (``driver.reserve_next_va``;
  unused when the model maps into an existing segment), and every ``alloc`` is checked: the
  model must pick the recorded address. Every recorded ``segment_free``/``segment_unmap`` is
  replayed exactly, at its address, through the allocator's own release path (``release_block``;
  ``unmap_block``), before the next malloc; a release the model cannot make (no whole free
  segment there) is a mismatch, and so is a whole free segment the model still holds after a
  recorded ``empty_cache()``. ``address_mismatches == 0`` means the model reproduced the run.
* **What-if** (another ``alloc_conf`` and/or ``total_memory``, or a capture): the same
  alloc/free sequence runs with addresses chosen by the model, starting from the allocations that
  were live when recording began (cached free memory is not carried over). A recorded ``oom``
  is retried: it shows whether the new settings would have avoided it. When they would, the
  entry's timeline point shows the request served; it is freed right after (the recorded
  program never had it).

* **Pinned host memory** (``host=True``): the snapshot's ``host_traces`` on the host allocator
  model instead (replay/host.py, docs/REPLAY.md "Pinned host memory").

Frees are replayed at ``free_completed`` (when the real allocator made the block reusable).
In a what-if, ``segment_free``/``segment_unmap`` bursts outside a malloc are replayed as
``empty_cache()`` and releases inside a malloc are left to the model. Not modelled: events
the trace cannot show (``record_stream`` timing beyond free_requested/free_completed), and a memory
fraction set with ``set_per_process_memory_fraction`` (not recorded). Private pools (MemPool, CUDA
graphs) are kept apart through ``segment_pool_id`` and the trace's ``pool_id`` (replay/pools.py).
"""
from __future__ import annotations

import time
import warnings

from gpumemlab.allocator import AllocatorConfig, DeviceCachingAllocator, OutOfMemoryError

from ..gc_pause import collector_paused
from .loop import LoopResult, run_trace
from .pools import PoolRouter
from .result import ReplayError, ReplayResult, ReplayWarning, Timeline
from .prepare import address_shift, recorded_alloc_conf, replay_devices  # noqa: F401
from .prepare import capacity as capacity_of
from .start import build_start_state, scan_start_state, start_reserved_bytes
from .trim import trim_start
from .host import HostReplayResult, replay_host
from ..source import read_snapshot

__all__ = ["replay", "resume", "ReplayResult", "HostReplayResult", "Timeline", "ReplayError", "ReplayWarning",
           "recorded_alloc_conf"]


def _source(source, device, shared=None):
    """-> (trace entries, final segments of that device, snapshot or None, name, device).
    ``shared``: a list to which the ``Snapshot``'s ``extra`` dict is appended (where what a
    replay works out from the recording alone is kept for the next replay of it)."""
    if getattr(source, "is_capture", False):  # a gpumemlab.recordings.capture.Capture
        return source.trace, [], None, "capture", 0 if device is None else device
    try:
        read = read_snapshot(source)
    except TypeError:
        raise ReplayError(f"replay needs a snapshot (dict or file) or a capture, "
                          f"not {type(source).__name__}") from None
    snap, name = read.snapshot, read.name or "snapshot"
    if shared is not None:
        shared.append(read.extra)
    traces = snap["device_traces"]
    if device is None:
        device = next((d for d, t in enumerate(traces) if t), None)
        if device is None:
            raise ReplayError(f"{name}: the snapshot has no trace to replay (record it with "
                              f"torch.cuda.memory._record_memory_history(enabled='all'))")
    if not 0 <= device < len(traces):
        raise ReplayError(f"{name}: no trace for device {device} ({len(traces)} device traces)")
    if len(traces[device]) <= 1 and any(e["action"] == "snapshot" for e in traces[device]):
        raise ReplayError(f"{name}: recorded with enabled='state' (no history): nothing to replay")
    segments = [s for s in snap["segments"] if s["device"] == device]
    return traces[device], segments, snap, name, device


@collector_paused
def replay(source, alloc_conf=None, total_memory=None, *, gpu=None, device=None,
           history: bool = False, stop_on_oom: bool = True, stop_at: int | None = None,
           progress=None, timeline: bool = True, checkpoints=None, host: bool = False) -> ReplayResult:
    """Replay ``source`` on the allocator model and return a :class:`ReplayResult`.

    Args:
        source: a snapshot dict or file with history, or a ``Capture``.
        alloc_conf: a ``PYTORCH_CUDA_ALLOC_CONF`` string for a what-if; None = as recorded.
        total_memory: device capacity (bytes or "80GiB"); None = the recording's if it had an
            OOM (reserved + free at that moment), else unlimited.
        gpu: a ``SimulatedGPU`` to run on (its allocator, settings and capacity are used and
            it keeps the final state); default a fresh allocator.
        device: which device's trace to replay (default: the first with a trace); the model
            is that device (its OOM messages name it).
        history: record the replay's own trace into the final snapshot (slower).
        stop_on_oom: stop at the first allocation that runs out of memory.
        stop_at: replay only the entries before this index (the state just before entry
            ``stop_at``, e.g. a recorded OOM).
        progress: called as ``progress(done, total)`` every 65536 entries.
        timeline: keep the per-entry timeline (False: an empty one, for a search that reads
            only the outcome and the peaks).
        checkpoints: a ``replay.checkpoints.Checkpoints`` that saves the state every so many
            entries, for :func:`resume` on smaller cards (a faithful replay only).
        host: replay the snapshot's ``host_traces`` (pinned host memory) instead, on the host
            allocator model; ``total_memory`` is then the host's pinnable bytes. Returns a
            ``HostReplayResult`` (replay/host.py).
    """
    if host:
        given = [k for k, v in (("gpu", gpu), ("device", device), ("stop_at", stop_at),
                                ("progress", progress)) if v is not None] + (
            ["history"] if history else [])
        if given:
            raise ReplayError(f"replay(host=True) replays the host trace only: "
                              f"{', '.join(given)} would be ignored")
        return replay_host(source, alloc_conf, total_memory)
    if gpu is not None and (alloc_conf is not None or total_memory is not None):
        given = "alloc_conf" if alloc_conf is not None else "total_memory"
        raise ReplayError(f"replay(gpu=...) runs on that gpu's own settings and capacity, so "
                          f"{given}= would be ignored: pass one or the other (make the gpu with "
                          f"SimulatedGPU(total_memory, alloc_conf=...) instead)")
    shared = []
    trace, segments, snap, name, device = _source(source, device, shared)
    is_capture = snap is None
    recorded_conf = "" if is_capture else recorded_alloc_conf(snap)
    faithful = not is_capture and alloc_conf is None and gpu is None
    conf = recorded_conf if alloc_conf is None else str(alloc_conf)
    capacity = capacity_of(total_memory, trace, segments)
    if gpu is not None:
        alloc = gpu.allocator
        conf, capacity = alloc.config.last_allocator_settings or "", alloc.total_memory
    else:
        try:
            config = AllocatorConfig.parse(conf)
        except Exception as exc:
            raise ReplayError(f"alloc_conf {conf!r}: {exc}") from None
        alloc = DeviceCachingAllocator(capacity, config=config, device=device,
                                       record_history=False)
    shift = _shared(shared, ("address_shift", device), lambda: address_shift(segments, trace)) \
        if faithful else 0
    translate = (lambda a: a + shift) if shift else (lambda a: a)
    # the start state depends on the settings only through round_size (start.py)
    rounding = tuple(alloc.config.roundup_power2_divisions_) if alloc.config.any_roundup else ()
    start = _shared(shared, ("start_state", device, rounding),
                    lambda: scan_start_state(segments, trace, alloc.config))
    notes = list(start.notes)
    router = PoolRouter(alloc)   # private pools stay apart (segment_pool_id, trace pool_id)
    start_oom, needed, start_trim = None, start_reserved_bytes(start), None
    if faithful and needed > alloc.driver.mem_get_info()[0]:
        # a card smaller than what was reserved when recording began: c10 would have released
        # the cache before failing (replay/trim.py)
        live, start_problems, start_oom, faithful, start_trim = trim_start(
            alloc, start, translate, router, needed, _start_whatif)
        if not faithful:
            translate, shift = (lambda a: a), 0    # model addresses from here on
    elif faithful:
        live, start_problems = build_start_state(alloc, start, translate, router)
    else:
        live, start_oom = _start_whatif(alloc, start, router)
        start_problems = []
    if faithful and start_problems:     # never a silent wrong answer: the result and a warning say so
        warnings.warn(f"{name}: the recording's start state could not be rebuilt exactly "
                      f"({len(start_problems)} problems, first: {start_problems[0]}); "
                      f"addresses after it may differ", ReplayWarning, stacklevel=2)
    if gpu is None:   # the rebuild is not part of the recording; a learner's gpu is left alone
        alloc.reset_peak_stats()
        alloc.reset_accumulated_stats()
    if history:
        alloc.record_history_settings(True)
    t0 = time.perf_counter()
    end = len(trace) if stop_at is None else max(0, min(int(stop_at), len(trace)))
    if start_oom is not None:      # the card is too small for what was live when recording began
        run = LoopResult.not_run(start_oom)
    else:
        if checkpoints is not None and not faithful:
            checkpoints = None            # only a faithful replay's states are any card's
        run = run_trace(alloc, trace, live, n=end, faithful=faithful, translate=translate,
                        router=router, stop_on_oom=stop_on_oom, progress=progress,
                        timeline=timeline, checkpoints=checkpoints)
    if checkpoints is not None and faithful and start_oom is None:
        checkpoints.setup = dict(source=name, alloc_conf=conf, recorded_alloc_conf=recorded_conf,
                                 faithful=faithful, device=device, start_problems=start_problems,
                                 notes=list(notes), address_shift=shift, translate=translate,
                                 stop_on_oom=stop_on_oom, end=end)
    elapsed = time.perf_counter() - t0
    return _result(trace, run, alloc, notes, elapsed, is_capture, source=name, alloc_conf=conf,
                   recorded_alloc_conf=recorded_conf, total_memory=capacity, faithful=faithful,
                   device=device, start_problems=start_problems, address_shift=shift,
                   start_trim=start_trim)


def _shared(shared, key, work):
    """``work()``, kept in the ``Snapshot``'s ``extra`` (``shared``: [it], or [] for a capture)
    under ``key`` for every later replay of the same recording: a search replays one recording
    dozens of times, and these scans of the whole trace are the same each time (read only)."""
    if not shared:
        return work()
    cache = shared[0].setdefault("replay", {})
    if key not in cache:
        cache[key] = work()
    return cache[key]


@collector_paused
def resume(source, checkpoints, total_memory: int) -> ReplayResult:
    """The faithful replay of ``source`` on ``total_memory`` bytes, from the latest state in
    ``checkpoints`` (saved by ``replay(source, checkpoints=...)`` on a bigger card) that this
    card reproduces; None when there is none (replay from the start instead). The result is
    the one ``replay(source, total_memory=...)`` gives, but for the timeline (empty) and
    ``elapsed_s``; under settings where that does not hold, ``checkpoints_exact`` is False and
    no state should be saved."""
    setup = checkpoints.setup
    found = None if setup is None or not setup["faithful"] else checkpoints.best(total_memory)
    if found is None:
        return None
    _, state = found
    trace = _source(source, setup["device"])[0]
    alloc = state["alloc"]
    alloc.driver.total_memory = total_memory
    t0 = time.perf_counter()
    run = run_trace(alloc, trace, state["live"], n=setup["end"], faithful=True,
                    translate=setup["translate"], router=state["router"],
                    stop_on_oom=setup["stop_on_oom"], timeline=False, resume=state["loop"])
    fixed = {k: setup[k] for k in ("source", "alloc_conf", "recorded_alloc_conf", "faithful",
                                   "device", "start_problems", "address_shift")}
    return _result(trace, run, alloc, list(setup["notes"]), time.perf_counter() - t0, False,
                   total_memory=total_memory, start_trim=None, **fixed)


def _result(trace, run, alloc, notes, elapsed, is_capture, **fixed) -> ReplayResult:
    """The ReplayResult of a pass: ``fixed`` holds the fields decided before it."""
    tl = run.timeline
    if any(e.get("user_metadata") for e in trace[:len(tl)]):   # step or phase marks
        tl.metadata = [e.get("user_metadata") or "" for e in trace[:len(tl)]]
    if run.unknown_frees:
        notes.append(f"{run.unknown_frees} frees of addresses that were never allocated "
                     f"(ignored)")
    if run.double_allocs:
        notes.append(f"{run.double_allocs} allocations at an address that was still live")
    stats = alloc.stats
    recorded = not is_capture      # a capture has no recorded addresses to compare
    return ReplayResult(
        allocator=alloc, timeline=tl, peak_reserved=stats.reserved_bytes[0].peak,
        peak_allocated=stats.allocated_bytes[0].peak, oom=run.oom,
        allocations=run.allocations,
        address_mismatches=(run.mismatches + run.segment_mismatches + run.oom_mismatches)
        if recorded else None,
        alloc_mismatches=run.mismatches if recorded else None,
        segment_mismatches=run.segment_mismatches if recorded else None,
        oom_mismatches=run.oom_mismatches if recorded else None,
        entries=len(trace), replayed=run.replayed, notes=notes, elapsed_s=elapsed, **fixed)


def _start_whatif(alloc, start, router):
    """Allocations live at the start, made in address order with the model's own addresses.

    Returns (recorded address -> Block, None), or (partial, oom) when the card runs out first:
    ``oom`` is reported as an OOM at entry 0 whose ``shortfall_bytes`` is a lower bound on the
    memory missing (the start allocations not yet made, less what the driver still had free).
    """
    live = {}
    order = sorted(start.live)
    for k, addr in enumerate(order):
        p = start.live[addr]
        try:
            live[addr] = router.malloc(getattr(p, "pool_id", None), p.requested_size or p.size, 0)
        except OutOfMemoryError as exc:
            missing = sum(start.live[a].size for a in order[k:])
            return live, {"index": 0, "entry": None, "size": p.size, "message": str(exc),
                          "during": "start state",
                          "shortfall_bytes": max(missing - exc.device_free, p.size - exc.device_free, 0)}
    return live, None
