"""Search the allocator settings on the replay: which ``PYTORCH_CUDA_ALLOC_CONF`` would have let a
recorded run fit, and the smallest card it fits on.

Every candidate is a what-if replay (``gml.replay(snap, alloc_conf=..., total_memory=...)``) of the
same allocation sequence on the same capacity, stopped at its first OOM; it reports fits or not,
peak reserved, headroom (capacity - peak reserved) and the first failing entry. The candidates:
``expandable_segments:True``; ``max_split_size_mb`` from 32 MiB up to the largest request (powers
of two); ``garbage_collection_threshold`` 0.6 and 0.8, which c10 only applies under a memory
fraction (``per_process_memory_fraction``, newest PyTorch; ``set_per_process_memory_fraction``
in code), so each comes with one just under 1.0; ``roundup_power2_divisions`` 4 and 8; and
combinations of the best single settings. The smallest card is a binary search on the capacity
under the recorded settings, to 2 MiB (c10 ``kRoundLarge``); it assumes that a run which fits a
card fits every bigger one, and the answer is verified by its own replay. Under the recorded
settings every replay is the faithful one (``alloc_conf=None``), which rebuilds the recorded
start state (the segments and cache of a recording begun mid-run); passing the recorded string
itself would be a what-if, which drops the cached start and so claims a card too small.

The replays are independent, so with several cores they run in worker processes (``fork``:
each worker inherits the recording instead of receiving a copy; one process off Linux or with
``workers=1``), in the same order and with the same results as one process;
the smallest-card bisection, sequential in itself, runs in one worker beside the candidates.
Both searches stop at a time budget (``budget_s``, shared): candidates not replayed by then are
marked ``skipped``, and the smallest card keeps the best card verified so far.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from dataclasses import dataclass

from gpumemlab.allocator.config import AllocatorConfig
from gpumemlab.recordings.replay import replay, resume
from gpumemlab.recordings.replay.checkpoints import Checkpoints, checkpoints_exact
from gpumemlab.recordings.replay.prepare import UNLIMITED_BYTES, recorded_alloc_conf

__all__ = ["Candidate", "candidates", "run_candidate", "search_settings", "smallest_card",
           "DEFAULT_BUDGET_S", "workers_available"]

MiB = 1 << 20
_STEP = 2 * MiB
FRACTION = 0.99   # the memory fraction that switches garbage collection on, giving up 1% of the card
DEFAULT_BUDGET_S = 120.0   # the settings search and the smallest-card search together


@dataclass
class Candidate:
    """One replayed setting: ``changes`` counts the keys it changes from the recorded settings."""

    name: str
    alloc_conf: str
    changes: int
    fits: bool | None = None
    peak_reserved_bytes: int | None = None
    headroom_bytes: int | None = None
    first_failing_entry: int | None = None
    shortfall_bytes: int | None = None
    error: str | None = None
    skipped: bool = False     # not replayed: the search's time budget ran out first


def _join(recorded: str, extra: str) -> str:
    """The recorded settings with ``extra``'s keys replaced (a later key wins in c10's parser)."""
    return ",".join(p for p in (recorded, extra) if p)


def candidates(recorded_conf: str, max_request: int, *, expandable_on: bool) -> list:
    """The settings to try, single changes first, then combinations."""
    out = []
    if not expandable_on:
        out.append(Candidate("expandable_segments", "expandable_segments:True", 1))
    split = 32
    while split * MiB <= max(max_request, 64 * MiB) and split <= 64 * 1024:
        out.append(Candidate(f"max_split_size_mb:{split}", f"max_split_size_mb:{split}", 1))
        split *= 4 if split >= 512 else 2
    for gc in (0.6, 0.8):
        out.append(Candidate(f"garbage_collection_threshold:{gc}",
                             f"garbage_collection_threshold:{gc},"
                             f"per_process_memory_fraction:{FRACTION}", 2))
    for div in (4, 8):
        out.append(Candidate(f"roundup_power2_divisions:{div}", f"roundup_power2_divisions:{div}", 1))
    return out


def combinations(singles: list, expandable_on: bool) -> list:
    """Pairs of the two best single candidates of different keys (by fit, then peak reserved)."""
    ranked = sorted((c for c in singles if c.error is None),
                    key=lambda c: (not c.fits, c.peak_reserved_bytes or 0))
    best, keys = [], set()
    for c in ranked:
        key = c.name.split(":")[0]
        if key not in keys:
            best.append(c)
            keys.add(key)
        if len(best) == 2:
            break
    out = []
    if len(best) == 2:
        a, b = best
        out.append(Candidate(f"{a.name} + {b.name}", f"{a.alloc_conf},{b.alloc_conf}",
                             a.changes + b.changes))
    if not expandable_on:
        split = next((c for c in ranked if c.name.startswith("max_split_size_mb")), None)
        if split is not None:
            out.append(Candidate(f"expandable_segments + {split.name}",
                                 f"expandable_segments:True,{split.alloc_conf}", 2))
    seen, unique = {s.alloc_conf for s in singles}, []
    for c in out:
        if c.alloc_conf not in seen:
            seen.add(c.alloc_conf)
            unique.append(c)
    return unique


def run_candidate(snap, c: Candidate, recorded_conf: str, capacity: int, device: int,
                  stop_at=None) -> Candidate:
    """Replay ``c`` (on top of the recorded settings) on ``capacity`` bytes; fill in its figures."""
    conf = _join(recorded_conf, c.alloc_conf)
    try:
        AllocatorConfig.parse(conf)
    except ValueError as exc:
        c.error = str(exc)
        return c
    r = _replay(snap, conf, capacity, device, stop_at)
    c.fits = r.oom is None
    c.peak_reserved_bytes = r.peak_reserved
    c.headroom_bytes = capacity - r.peak_reserved if c.fits else None
    c.first_failing_entry = None if r.oom is None else r.oom["index"]
    c.shortfall_bytes = None if r.oom is None else r.oom.get("shortfall_bytes")
    return c


def _replay(snap, conf: str, capacity: int, device: int, stop_at, checkpoints=None):
    """``replay`` under ``conf``: the faithful replay (recorded start state kept) when ``conf``
    is what the recording ran under, a what-if otherwise. No timeline: the search reads only
    the outcome and the peaks."""
    recording = getattr(snap, "snapshot", snap)     # a read_snapshot result, or the dict
    same = isinstance(recording, dict) and conf == recorded_alloc_conf(recording)
    return replay(snap, alloc_conf=None if same else conf, total_memory=capacity, device=device,
                  stop_at=stop_at, timeline=False, checkpoints=checkpoints if same else None)


def workers_available(workers=None) -> int:
    """How many processes the search uses: ``workers``, else one per core; 1 off Linux (no
    safe fork), and 1 inside a daemon process (a pool's worker may not start processes of its own)."""
    if not sys.platform.startswith("linux") or multiprocessing.current_process().daemon:
        return 1          # fork is safe on Linux only (macOS frameworks break in a forked child)
    n = len(os.sched_getaffinity(0)) if workers is None else int(workers)   # cores we may use
    return max(1, n)


_JOB = {}   # what forked workers inherit: the recording and the fixed replay arguments


def _replay_one(c: Candidate) -> Candidate:
    return run_candidate(_JOB["snap"], c, *_JOB["args"])


def _card_one(conf, device, stop_at, deadline):
    return smallest_card(_JOB["snap"], conf, device, stop_at=stop_at, deadline=deadline)


def _collect(cands, jobs, deadline):
    """The finished candidates of ``jobs`` (one per candidate) by ``deadline``; the rest
    are marked skipped."""
    out = []
    for c, job in zip(cands, jobs):
        left = deadline - time.monotonic()
        if left > 0:
            job.wait(None if left == float("inf") else left)
        if job.ready():
            out.append(job.get())
        else:
            c.skipped = True
            out.append(c)
    return out


def _run_serial(cands, snap, args, deadline):
    out = []
    for c in cands:
        if time.monotonic() >= deadline:
            c.skipped = True
            out.append(c)
        else:
            out.append(run_candidate(snap, c, *args))
    return out


def search_settings(snap, recorded_conf: str, capacity: int, device: int, max_request: int,
                    expandable_on: bool, stop_at=None, *, workers=None,
                    deadline: float | None = None, card_conf: str | None = None):
    """Every candidate replayed (``workers`` processes; until ``deadline``, a
    ``time.monotonic()`` value); singles first, then combinations. With ``card_conf`` (the
    recorded settings) it returns ``(candidates, smallest_card(...))``, the smallest-card
    search running in a worker of its own beside the candidates."""
    workers = workers_available(workers)
    deadline = float("inf") if deadline is None else deadline
    args = (recorded_conf, capacity, device, stop_at)
    singles = candidates(recorded_conf, max_request, expandable_on=expandable_on)
    if workers <= 1:
        singles = _run_serial(singles, snap, args, deadline)
        combos = _run_serial(combinations([c for c in singles if not c.skipped], expandable_on),
                             snap, args, deadline)
        if card_conf is None:
            return singles + combos
        return singles + combos, smallest_card(snap, card_conf, device, stop_at=stop_at,
                                               deadline=deadline)
    _JOB.update(snap=snap, args=args)
    try:
        pool = multiprocessing.get_context("fork").Pool(min(workers, len(singles) + 1))
    except OSError:            # no processes to be had (a sandbox's limit): one process
        _JOB.clear()
        return search_settings(snap, recorded_conf, capacity, device, max_request,
                               expandable_on, stop_at, workers=1, deadline=deadline,
                               card_conf=card_conf)
    try:
        card_job = None if card_conf is None else pool.apply_async(
            _card_one, (card_conf, device, stop_at, deadline))
        singles = _collect(singles, [pool.apply_async(_replay_one, (c,)) for c in singles],
                           deadline)
        combos = combinations([c for c in singles if not c.skipped], expandable_on)
        combos = _collect(combos, [pool.apply_async(_replay_one, (c,)) for c in combos],
                          deadline)
        if card_job is None:
            return singles + combos
        return singles + combos, card_job.get()      # it stops at the deadline by itself
    finally:
        pool.terminate()      # stops replays still running after the budget
        pool.join()
        _JOB.clear()


def smallest_card(snap, conf: str, device: int, *, stop_at=None,
                  deadline: float | None = None) -> dict:
    """The least capacity (to 2 MiB) on which ``snap`` replays under ``conf`` without an OOM.

    Returns ``{"bytes", "peak_reserved_bytes", "replays", "stopped_at_budget"}``; ``bytes`` is
    None when even an unlimited card runs out (a request beyond the model's address space).
    Past ``deadline`` (``time.monotonic()``) the bisection stops: ``bytes`` is then the
    smallest card verified so far, which fits but may not be the least.
    """
    deadline = float("inf") if deadline is None else deadline
    saves = None
    if checkpoints_exact(AllocatorConfig.parse(conf)):
        # the unlimited replay's states are every smaller card's until it reserves more than
        # the card: each probe resumes from the latest such state (replay/checkpoints.py)
        recording = getattr(snap, "snapshot", snap)
        traces = (recording.get("device_traces") or []) if isinstance(recording, dict) else []
        entries = len(traces[device]) if isinstance(device, int) and 0 <= device < len(traces) \
            else 0
        if stop_at is not None:
            entries = min(entries, max(int(stop_at), 0))
        saves = Checkpoints(entries) if entries else None   # a file or capture: none saved
    top = _replay(snap, conf, UNLIMITED_BYTES, device, stop_at, checkpoints=saves)
    if saves is not None and saves.setup is None:
        saves = None                      # not a faithful replay: nothing saved to resume
    replays = 1
    if top.oom is not None:
        return {"bytes": None, "peak_reserved_bytes": None, "replays": replays,
                "stopped_at_budget": False}
    hi = -(-top.peak_reserved // _STEP) * _STEP          # fits: the unlimited run never needed more
    lo = max(top.peak_allocated // _STEP * _STEP - _STEP, 0)   # cannot fit: below what was live
    best_peak, verified, stopped = top.peak_reserved, False, False
    while hi - lo > _STEP:
        if time.monotonic() >= deadline:
            stopped = True
            break
        mid = (lo + hi) // 2 // _STEP * _STEP
        r = _probe(snap, conf, mid, device, stop_at, top, saves)
        replays += 1
        if r.oom is None:
            hi, best_peak, verified = mid, r.peak_reserved, True
        else:
            lo = mid
    if not verified:
        r = _probe(snap, conf, hi, device, stop_at, top, saves)
        replays += 1
        if r.oom is not None:        # not monotone after all: say so rather than guess
            return {"bytes": None, "peak_reserved_bytes": None, "replays": replays,
                    "stopped_at_budget": stopped}
        best_peak = r.peak_reserved
    return {"bytes": hi, "peak_reserved_bytes": best_peak, "replays": replays,
            "stopped_at_budget": stopped}


def _probe(snap, conf, capacity, device, stop_at, top, saves):
    """The replay of the card search on ``capacity`` bytes. With saved states (``saves``): a
    card holding the unlimited replay's whole peak replays it exactly (``top`` is the answer),
    and a smaller one resumes from the latest state it reproduces."""
    if saves is None:
        return _replay(snap, conf, capacity, device, stop_at)
    if capacity >= top.peak_reserved:
        return top                        # decided: no driver call of it fails on this card
    return resume(snap, saves, capacity) or _replay(snap, conf, capacity, device, stop_at)
