"""Lesson 09, diagnosing a run: the recording it diagnoses (``RECORDING``, a real torch
training loop captured on the CPU and run on a simulated card until it failed; made by
``training_run.py``, provenance in ``data/README.md``) and its exercise (which live tensors
to free at the recorded OOM so that the failed request succeeds, freeing the fewest bytes: c10's
``malloc`` finds room in a free block of one segment, or by ``release_cached_blocks`` handing
wholly free segments back to the driver before it raises).
"""
from __future__ import annotations

from pathlib import Path

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question

RECORDING = Path(__file__).resolve().parent / "data" / "training_run.pickle"

def recording_09() -> dict:
    """Lesson 09's recording, loaded (a snapshot with its trace, ending in an OOM)."""
    from gpumemlab.recordings.files import load_snapshot

    return load_snapshot(RECORDING)


# -- 09: the fewest bytes to free at the recorded OOM so that its request succeeds
_CARD = []        # the recorded card and settings, read once from a faithful replay
_SNAP = []        # the recording, loaded once for the judge (loading it takes 0.5 s); only read


def _snap_09() -> dict:
    if not _SNAP:
        _SNAP.append(recording_09())
    return _SNAP[0]


def oom_state_09():
    """The card as it stood when the recorded request failed: a SimulatedGPU of the recorded
    card and settings, the recording replayed up to (not including) the OOM; and the request."""
    from gpumemlab.devices.simulated import SimulatedGPU
    from gpumemlab.recordings.replay import replay

    snap = _snap_09()
    trace = snap["device_traces"][0]
    if not _CARD:
        recorded = replay(snap, timeline=False)
        _CARD.append((recorded.total_memory, recorded.recorded_alloc_conf or ""))
    gpu = SimulatedGPU(_CARD[0][0], alloc_conf=_CARD[0][1], record_frames=False,
                       record_history=False)
    replay(snap, gpu=gpu, stop_at=len(trace) - 1, timeline=False)
    return gpu, trace[-1]["size"]


def request_fits_09(addresses) -> tuple:
    """Free the live tensors at ``addresses`` (of the recorded snapshot's blocks) in the OOM's
    state, then make the failed request again: (whether it succeeded, the bytes freed)."""
    from gpumemlab.allocator.oom import OutOfMemoryError

    gpu, request = oom_state_09()
    live = gpu.allocator.active_blocks
    freed = 0
    for a in addresses:
        freed += live[a].size
        gpu.allocator.free(live[a])
    try:
        gpu.allocator.malloc(request)
        return True, freed
    except OutOfMemoryError:
        return False, freed


def _live_09(snap=None) -> dict:
    """{address: (segment number, bytes)} of the snapshot's live blocks, segments by address."""
    segments = sorted((snap or _snap_09())["segments"], key=lambda s: s["address"])
    return {b["address"]: (k, b["size"]) for k, s in enumerate(segments) for b in s["blocks"]
            if b["state"] == "active_allocated"}


_FEWEST = []


def FREE_AT_MOST_09() -> int:
    """The fewest bytes whose freeing lets the recorded request succeed: the cheaper of the two
    ways c10's malloc finds room, a free block of the request's size made by freeing a run of
    neighbours inside one segment, or a segment emptied whole (``release_cached_blocks`` returns
    it to the driver, which then holds enough with what it had free); checked on the model."""
    if not _FEWEST:
        snap = _snap_09()
        trace = snap["device_traces"][0]
        request, driver = trace[-1]["size"], trace[-1]["device_free"]
        options = []
        for s in snap["segments"]:
            blocks = s["blocks"]
            live = [b for b in blocks if b["state"] == "active_allocated"]
            if driver + s["total_size"] >= -(-request // (2 * MiB)) * 2 * MiB:
                options.append(live)                 # emptied whole, handed back, cudaMalloc
            for i in range(len(blocks)):             # a run of neighbours, merged
                for j in range(i, len(blocks)):
                    run = blocks[i:j + 1]
                    if s["segment_type"] == "large" and sum(b["size"] for b in run) >= request:
                        options.append([b for b in run if b["state"] == "active_allocated"])
        plan = min(options, key=lambda p: sum(b["size"] for b in p))
        fits, freed = request_fits_09([b["address"] for b in plan])
        assert fits, "the cheapest plan must make the request succeed on the model"
        _FEWEST.append(freed)
    return _FEWEST[0]


def _addresses(answer) -> list:
    live = _live_09()
    if not isinstance(answer, list) or not all(
            isinstance(a, int) and not isinstance(a, bool) for a in answer):
        raise AnswerShapeError("the answer is a list of addresses of live blocks of "
                               "recording_09()['segments']")
    wrong = [a for a in answer if a not in live]
    if wrong:
        raise AnswerShapeError(f"{wrong[:3]} are not the addresses of live blocks (state "
                               f"'active_allocated') of the recorded snapshot")
    return sorted(set(answer))


@exercise("09.ex", "the fewest bytes to free at the OOM",
          "Back to the moment lesson 09's recorded run failed "
          "(gpumemlab.lessons.diagnose_your_run.recording_09(): its segments are the state at "
          "the OOM, the trace's last entry the failed request). Same card, same settings: which "
          "live tensors (the addresses of their blocks) would you free first so that the failed "
          "request succeeds, freeing at most FREE_AT_MOST_09() bytes (the same module)? "
          "request_fits_09(addresses) frees them on the model and makes the request again.",
          "a list of addresses of live blocks (ints, from recording_09()['segments'])",
          hints=("Read the OOM message and the block map together: how big is the request, how "
                 "much does the driver still have free, and where is the free cached memory?",
                 "malloc has two ways to find room: a free block of the request's size in one "
                 "segment (freed neighbours merge with free ones), or, before it raises, hand "
                 "every wholly free segment back to the driver and ask it again. What does each "
                 "cost you here?",
                 "Price every segment both ways, in live bytes, small pool included: a segment "
                 "the driver gets back need not be large."),
          stub=[])
def _judge_09(answer):
    chosen = _addresses(answer)
    fits, freed = request_fits_09(chosen)
    most = FREE_AT_MOST_09()
    figures = {"freed_bytes": freed, "tensors_freed": len(chosen), "succeeded": fits}
    if fits and freed <= most:
        return True, (f"freeing {format_size(freed)} ({len(chosen)} tensors) lets the request "
                      "succeed"), figures
    if fits:
        return False, (f"the request succeeds, but you freed {format_size(freed)}, more than "
                       f"{format_size(most)}: a malloc that finds no free block hands wholly "
                       "free segments back to the driver before it raises; which segment costs "
                       "least to empty?"), figures
    touched = sorted({_live_09()[a][0] for a in chosen})
    why = ("the request still fails: no free block in one segment is large enough, and no "
           "segment was emptied for the driver to take back")
    if len(touched) == 1:
        why += (f": segment {touched[0]} (by address) still holds live tensors, so the allocator "
                "cannot hand it back, and what you freed in it is no block of the request's size")
    elif touched:
        why += (f": segments {touched} (by address) still hold live tensors, and freed blocks in "
                "different segments never merge")
    return False, why, figures


# -- the lesson's predict questions (see why_a_cache)
question("09.p1", "choice", choices=("FRAGMENTATION", "EXHAUSTION"), misconceptions=(
    Misconception("EXHAUSTION", "Reserved-but-unallocated memory plus what the driver still had "
                  "would have held the request; only no single free block was large enough. "
                  "That is fragmentation: the card was not too small."),
))
question("09.p2", "number", unit="settings")
