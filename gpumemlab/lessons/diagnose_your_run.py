"""Lesson 09, diagnosing a run: the recording it diagnoses (``RECORDING``, a real torch
training loop captured on the CPU and run on a simulated card until it failed; made by
``training_run.py``, provenance in ``data/README.md``) and its exercise (the smallest card the
recorded run fits on with expandable segments).
"""
from __future__ import annotations

from pathlib import Path

from gpumemlab.quizkit.exercise_base import exercise, size_answer
from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question

RECORDING = Path(__file__).resolve().parent / "data" / "training_run.pickle"

# -- 09: the smallest card a recorded run fits on, with expandable segments
STEP_09 = 2 * MiB


def recording_09() -> dict:
    """Lesson 09's recording, loaded (a snapshot with its trace, ending in an OOM)."""
    from gpumemlab.recordings.files import load_snapshot

    return load_snapshot(RECORDING)


def fits_09(total_memory: int, conf: str = "expandable_segments:True") -> bool:
    from gpumemlab.recordings.replay import replay

    return replay(recording_09(), alloc_conf=conf, total_memory=total_memory).oom is None


@exercise("09.ex", "the smallest card that runs it",
          "Replay lesson 09's recorded run (gpumemlab.lessons.diagnose_your_run.recording_09(), "
          "the OOM the lesson diagnoses) with expandable_segments:True on smaller and smaller "
          "cards. What is the smallest card size on which it runs without an OOM? Answer to "
          "within 2 MiB.",
          "a size: bytes, or a string with a unit (B, KiB, MiB, GiB)",
          hints=("gml.replay(recording, alloc_conf='expandable_segments:True', "
                 "total_memory=size).oom is None means it fits.",
                 "It fits on the recorded card (gml.replay(recording).total_memory); bisect "
                 "below that.",
                 "Your answer must fit, and 2 MiB less must not."),
          stub="1 GiB")
def _judge_09(answer):
    size = size_answer(answer, name="the card size")
    if size < STEP_09:
        return False, f"a {format_size(size)} card is below the {format_size(STEP_09)} step", {}
    fits = fits_09(size)
    smaller = fits_09(size - STEP_09) if fits else None
    figures = {"card_bytes": size, "fits": fits, "step_less_fits": smaller}
    if not fits:
        return False, f"on a {format_size(size)} card the replay runs out of memory", figures
    if smaller:
        return False, (f"it fits on {format_size(size)}, and on "
                       f"{format_size(size - STEP_09)} too: a smaller card works"), figures
    return True, (f"it fits on {format_size(size)} and runs out of memory on "
                  f"{format_size(size - STEP_09)}"), figures


# -- the lesson's predict questions (see why_a_cache)
question("09.p1", "choice", choices=("FRAGMENTATION", "EXHAUSTION"), misconceptions=(
    Misconception("EXHAUSTION", "Reserved-but-unallocated memory plus what the driver still had "
                  "would have held the request; only no single free block was large enough. "
                  "That is fragmentation: the card was not too small."),
))
question("09.p2", "number", unit="settings")
