"""Lesson 07, activations: its exercise (the largest batch with checkpointing on a card) and its
selftest workload ``activations`` (a layered forward and backward that keeps every activation,
or with ``checkpoint=True`` only each layer's input, recomputing the rest in backward). The
lesson's model is ``tiny_lm``.
"""
from __future__ import annotations

import random

from gpumemlab.devices.scenarios import device_chunk, ScenarioRun
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 07: the largest batch that fits a card, with checkpointing
def card_07() -> int:
    """Lesson 07's tight card: halfway between the batch-32 peaks reserved without and with
    checkpointing, in 2 MiB steps (computed from the replays, as the lesson does)."""
    from gpumemlab.recordings.replay import replay
    from gpumemlab.lessons.tiny_lm import record_step

    off, on = (replay(record_step(32, ckpt=c)).peak_reserved for c in (False, True))
    return (off + on) // 2 // (2 * MiB) * (2 * MiB)


def exercise_card_07() -> int:
    """The exercise's card: one and a half times the lesson's tight card, in 2 MiB steps."""
    return card_07() * 3 // 2 // (2 * MiB) * (2 * MiB)


def fits_07(batch: int, ckpt: bool, card: int) -> bool:
    from gpumemlab.recordings.replay import replay
    from gpumemlab.lessons.tiny_lm import record_step

    return replay(record_step(batch, ckpt=ckpt), total_memory=card).oom is None


@exercise("07.ex", "the largest batch with checkpointing",
          "Lesson 07's model (gpumemlab.lessons.tiny_lm), one training step with "
          "checkpointing, sequence 64, replayed on a card of "
          "gpumemlab.lessons.activations.exercise_card_07() bytes (one and a half times "
          "the lesson's tight card). What is the largest batch size whose step fits?",
          "a whole number (the batch size)",
          hints=("gml.replay(record_step(batch, ckpt=True), total_memory=card).oom is None means "
                 "it fits.",
                 "The peak grows with the batch: bisect between a batch that fits and one that "
                 "does not.",
                 "Answer the largest batch b that fits while b + 1 does not."),
          stub=32)
def _judge_07(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or not 1 <= answer <= 512:
        raise AnswerShapeError("the answer must be a whole batch size from 1 to 512")
    card = exercise_card_07()
    fits = fits_07(answer, True, card)
    more = fits_07(answer + 1, True, card) if fits else None
    figures = {"batch": answer, "card_bytes": card, "fits": fits, "next_fits": more}
    if not fits:
        return False, f"batch {answer} runs out of memory on the {format_size(card)} card", figures
    if more:
        return False, f"batch {answer} fits, and so does batch {answer + 1}", figures
    return True, (f"batch {answer} fits the {format_size(card)} card with checkpointing and "
                  f"batch {answer + 1} does not"), figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
def activations(gpu, *, checkpoint: bool = False, layers: int = 8, per_layer: int = 3,
                seed: int = 0, release: bool = True):
    """Weights (1/16 of the device); forward: each layer makes ``per_layer`` internal
    activations and an output (about 1/24 of the device each); without checkpointing all are
    kept for backward, with it only the layer outputs are, and the internals are freed at once
    and recomputed layer by layer in backward. Backward frees them as the gradients pass."""
    rng = random.Random(seed)
    run = ScenarioRun(gpu, "activations_checkpointed" if checkpoint else "activations")
    unit = gpu.total_memory // 24
    size = [[unit + rng.randrange(0, unit // 8, 512) for _ in range(per_layer + 1)]
            for _ in range(layers)]
    run.alloc("w", device_chunk(gpu, 16), "weights")
    if not _forward_backward(run, size, per_layer, checkpoint):
        for key in [k for k in run.live if k != "w"]:     # the OOM unwinds the step
            run.free(key, "the OOM ends the step: its tensors are freed")
    run.rec.notes.update(checkpoint=checkpoint, activation_bytes=sum(map(sum, size)),
                         peak_allocated=gpu.max_memory_allocated())
    return run.finish(release)


def _forward_backward(run, size, per_layer, checkpoint) -> bool:
    """One training step of ``activations``; False at the first OOM."""
    layers = len(size)
    for i in range(layers):
        for j in range(per_layer):
            if not run.alloc(("in", i, j), size[i][j], f"forward layer {i}: internal {j}"):
                return False
        if not run.alloc(("out", i), size[i][per_layer], f"forward layer {i}: output"):
            return False
        if checkpoint:
            for j in range(per_layer):
                run.free(("in", i, j), f"forward layer {i}: internal {j} dropped (checkpoint)")
    for i in reversed(range(layers)):
        if checkpoint:
            for j in range(per_layer):
                if not run.alloc(("in", i, j), size[i][j], f"backward layer {i}: internal {j} recomputed"):
                    return False
        if not run.alloc("grad", size[i][per_layer], f"backward layer {i}: gradient of its input"):
            return False
        for j in reversed(range(per_layer)):
            run.free(("in", i, j), f"backward layer {i}: internal {j} freed")
        run.free(("out", i), f"backward layer {i}: output freed")
        run.free("grad", f"backward layer {i}: gradient passed on")
    return True


# -- the lesson's predict questions (see why_a_cache)
question("07.p1", "size")
question("07.p2", "number", unit="times", tolerance=0.01,
         tolerance_why="a ratio of two peaks, shown to 2 decimals", misconceptions=(
             Misconception(lambda a: 4, "The activations grow 4 times with the batch, but the "
                           "parameters and their gradients do not: the peak grows by less."),
         ))
question("07.p3", "number", unit="samples per batch")
question("07.p4", "choice", choices=("none of it", "under a tenth", "about half", "all of it"))
