"""Lesson 07, activations: its exercise (which layers of a deeper layered model to checkpoint,
as ``torch.utils.checkpoint`` does layer by layer, so that its live tensors stay within a
limit and the least is made again) and its selftest workload ``activations`` (a layered forward
and backward that keeps every activation, or with ``checkpoint=True`` only each layer's input,
recomputing the rest in backward). The lesson's model is ``tiny_lm``.
"""
from __future__ import annotations

import random

from gpumemlab.devices.scenarios import device_chunk, ScenarioRun
from gpumemlab.quizkit.exercise_base import exercise, numbered_answer
from gpumemlab.units import format_size, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 07: which layers to checkpoint so that a deeper step's peak stays under a limit
# The kit's layered model, 24 layers deep: layer i makes internals of EX_INTERNALS_07[i]
# bytes (what autograd saves for its backward) and an 8 MiB output, the next layer's input
EX_INTERNALS_07 = tuple(m * MiB + q * 256 * 1024 for m, q in (
    (102, 1), (121, 0), (38, 0), (113, 0), (149, 1), (29, 0), (131, 3), (37, 1), (43, 3),
    (35, 0), (58, 1), (141, 2), (72, 0), (124, 3), (77, 0), (167, 3), (32, 1), (31, 1), (94, 3),
    (56, 0), (166, 2), (163, 1), (46, 1), (115, 0)))
EX_OUTPUT_07, EX_WEIGHTS_07 = 8 * MiB, 512 * MiB
EX_LIMIT_07 = 1800 * MiB


def selective_step_07(checkpointed) -> dict:
    """One training step of the exercise's model on a fresh simulated card, the layers numbered
    in ``checkpointed`` checkpointed (as ``torch.utils.checkpoint``: in forward their internals
    are freed once the output is made, and made again in backward just before their gradient;
    the others keep theirs). Returns {"peak_live": the most bytes its tensors held at once, as
    they asked for them (``memory_stats()["requested_bytes.all.peak"]``, before the allocator
    rounds them up), "recomputed_bytes"}."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU("8GiB", alloc_conf="", record_history=False, record_frames=False)
    chosen, inside, outputs = set(checkpointed), {}, []
    weights = gpu.empty(EX_WEIGHTS_07)
    for i, size in enumerate(EX_INTERNALS_07):                # forward
        inside[i] = gpu.empty(size)
        outputs.append(gpu.empty(EX_OUTPUT_07))
        if i in chosen:
            inside.pop(i).free()
    recomputed = 0
    for i in reversed(range(len(EX_INTERNALS_07))):          # backward
        if i in chosen:
            inside[i] = gpu.empty(EX_INTERNALS_07[i])         # the layer's forward again
            recomputed += EX_INTERNALS_07[i]
        grad = gpu.empty(EX_OUTPUT_07)                         # the gradient of its input
        inside.pop(i).free()
        outputs.pop().free()
        grad.free()
    weights.free()
    return {"peak_live": gpu.memory_stats()["requested_bytes.all.peak"],
            "recomputed_bytes": recomputed}


_BEST_07 = []


def RECOMPUTE_AT_MOST_07() -> int:
    """The fewest internals' bytes a plan within ``EX_LIMIT_07`` recomputes: in backward, layer i
    holds the weights, every output and kept internals before it, its own internals (kept or made
    again) and output, and a gradient; the most internals kept with every such sum under the
    limit is found over the layers in order, then checked on the simulated step."""
    if not _BEST_07:
        kept = {0: ()}                        # internals kept so far -> layers checkpointed
        for i, size in enumerate(EX_INTERNALS_07):
            room = EX_LIMIT_07 - EX_WEIGHTS_07 - (i + 2) * EX_OUTPUT_07 - size
            kept = {k: plan for k, plan in kept.items() if k <= room}
            grown = {k + size: plan for k, plan in kept.items()}
            grown.update({k: plan + (i,) for k, plan in kept.items() if k not in grown})
            kept = grown
        run = selective_step_07(kept[max(kept)])
        assert run["peak_live"] <= EX_LIMIT_07, run
        _BEST_07.append(run["recomputed_bytes"])
    return _BEST_07[0]


def _layer_numbers_07(answer) -> list:
    return numbered_answer(answer, len(EX_INTERNALS_07), "layer")


@exercise("07.ex", "which layers to checkpoint",
          f"A deeper model than the lesson's: {len(EX_INTERNALS_07)} layers, each saving "
          "internals of EX_INTERNALS_07 bytes for its backward and passing an 8 MiB output on, "
          "beside 512 MiB of weights (gpumemlab.lessons.activations). Checkpointing a layer "
          "frees its internals in forward and makes them again in backward, just before its "
          "gradient. Which layers (their numbers) should be checkpointed so that the step's "
          f"live tensors never add up to more than {format_size(EX_LIMIT_07)} and the internals made again "
          "add up to at most RECOMPUTE_AT_MOST_07() bytes (the same module)? "
          "selective_step_07(layers) runs a plan on the simulated card.",
          "a list of layer numbers (indices into EX_INTERNALS_07)",
          hints=("When is the peak? Walk backward layer by layer: what is live while layer i's "
                 "gradient is made, whether or not layer i was checkpointed?",
                 "At layer i the card holds the weights, every output, the internals kept by the "
                 "layers before i, layer i's own internals (kept or made again) and a gradient. "
                 "Which layers does checkpointing the last one help?",
                 "Each layer gives one limit on what the layers before it may keep: keep as many "
                 "internals' bytes as those limits allow, layer by layer from the first."),
          stub=[])
def _judge_07(answer):
    chosen = _layer_numbers_07(answer)
    run = selective_step_07(chosen)
    most = RECOMPUTE_AT_MOST_07()
    peak, again = run["peak_live"], run["recomputed_bytes"]
    figures = {"checkpointed": chosen, "peak_live": peak, "recomputed_bytes": again}
    last = len(EX_INTERNALS_07) - 1
    if peak > EX_LIMIT_07:
        kept, top, at = 0, -1, 0
        for i, size in enumerate(EX_INTERNALS_07):      # the layer whose backward peaks
            if kept + (i + 1) * EX_OUTPUT_07 + size > top:
                top, at = kept + (i + 1) * EX_OUTPUT_07 + size, i
            kept += 0 if i in chosen else size
        before = sum(s for i, s in enumerate(EX_INTERNALS_07[:at]) if i not in chosen)
        why = (f"the live tensors reach {format_size(peak)}, over the {format_size(EX_LIMIT_07)}, "
               f"at layer {at}'s backward: the weights, {at + 1} outputs and a gradient, "
               f"{format_size(before)} of internals kept by the layers before it, and its own "
               f"{format_size(EX_INTERNALS_07[at])}")
        if at in chosen:
            why += (", made again while the internals kept before it are still there: "
                    "checkpointing it did not lower this peak")
        return False, why, figures
    if again <= most:
        return True, (f"the live tensors peak at {format_size(peak)} and the step makes "
                      f"{format_size(again)} of internals again"), figures
    why = (f"the live tensors peak at {format_size(peak)}, but the step makes {format_size(again)} "
           f"of internals again, more than {format_size(most)}")
    if last in chosen:
        why += (f": layer {last} is checkpointed, yet its internals are made again at once, "
                "before the peak can fall; what did it save?")
    else:
        why += (": the internals a layer keeps weigh only on the layers after it (at each "
                "layer's backward only the layers before it still hold theirs): another choice "
                "keeps more within the limit")
    return False, why, figures


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
