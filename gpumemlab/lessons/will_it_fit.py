"""Lesson 16, will it fit: the planner (``gml.plan``) on a GPT-style model traced on fake tensors.
Its exercise (the cheapest combination of levers, bf16 autocast and checkpointing the first k
blocks, that fits the lesson's model at batch 32 on a 4 GiB card) is judged by the planner itself:
each configuration traced on fake CPU tensors and replayed on the simulated card at judge time.
It also registers the lesson's predict questions, so a prediction typed after a kernel restart is
still read in the question's unit.
"""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question

# the lesson's model (its section 1), a batch and a card the lesson does not plan
DIMS_16 = dict(layers=6, hidden=512, heads=8, seq=512, vocab=8192)
BATCH_16, CARD_16 = 32, "4GiB"
PRECISIONS_16 = ("fp32", "bf16")


def plan_16(precision: str, checkpoint: int):
    """``gml.plan`` of two AdamW steps of the lesson's model at ``BATCH_16`` on ``CARD_16``, on fake
    CPU tensors (as the lesson), with ``precision`` ("fp32": as built, or "bf16": autocast) and
    the first ``checkpoint`` blocks checkpointed; only the step itself, no searches."""
    import torch
    from gpumemlab.planner.models import gpt
    from gpumemlab.planner.plan import plan

    return plan(lambda: gpt(**DIMS_16), lambda p: torch.optim.AdamW(p),
                lambda b: torch.randint(0, DIMS_16["vocab"], (b, DIMS_16["seq"])),
                total_memory=CARD_16, batch_size=BATCH_16, steps=2, device="cpu",
                precision=None if precision == "fp32" else precision,
                checkpointing=tuple(range(checkpoint)) or None,
                levers=False, largest_batch=False, settings=False)


def _levers_16(answer) -> tuple:
    if not isinstance(answer, dict) or set(answer) != {"precision", "checkpoint"}:
        raise AnswerShapeError('the answer has two keys, "precision" and "checkpoint"')
    precision, k = answer["precision"], answer["checkpoint"]
    if precision not in PRECISIONS_16:
        raise AnswerShapeError(f'"precision" is "fp32" or "bf16", not {precision!r}')
    layers = DIMS_16["layers"]
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= layers:
        raise AnswerShapeError(f'"checkpoint" is a whole number of blocks from 0 to {layers}')
    return precision, k


@exercise("16.ex", "the cheapest levers that fit",
          f"The lesson's model (6 blocks, hidden 512, 512 tokens, AdamW, fp32) must train at batch "
          f"{BATCH_16}, in one pass (no accumulation), on a {CARD_16[:-3]} GiB card. Two levers: "
          "bf16 autocast, and checkpointing the first k blocks (each checkpointed block runs its "
          "forward again in backward). Give the combination that fits with the fewest extra "
          "floating-point operations. Plan with gml.plan(..., device=\"cpu\") as the lesson does.",
          'a dict: {"precision": "fp32" or "bf16", "checkpoint": k}',
          hints=("Which lever costs no extra FLOPs at all? Take it first.",
                 "Each checkpointed block saves about one block's activations and costs one "
                 "block's forward: count how many blocks you need, not which.",
                 "gml.plan(make_model, make_optimizer, tokens, total_memory=..., batch_size=..., "
                 "precision=..., checkpointing=tuple(range(k)), device=\"cpu\", levers=False, "
                 "largest_batch=False, settings=False).fits, for a few k."),
          stub={"precision": "fp32", "checkpoint": 0})
def _judge_16(answer):
    from gpumemlab.units import format_size

    precision, k = _levers_16(answer)
    p = plan_16(precision, k)
    figures = {"precision": precision, "checkpoint": k, "fits": p.fits,
               "peak_reserved_bytes": p.peak_reserved_bytes, "capacity_bytes": p.capacity_bytes}
    if not p.fits:
        return False, (f"{p.config.label()} does not fit: its peak reserved "
                       f"{format_size(p.peak_reserved_bytes)} is over the "
                       f"{format_size(p.capacity_bytes)} the allocator gets"), figures
    # bf16 adds no FLOPs and each checkpointed block the same forward: a cheaper combination
    # is one with fewer blocks checkpointed, in either precision
    for cheaper in ("bf16", "fp32") if k else ():
        if plan_16(cheaper, k - 1).fits:
            figures["cheaper"] = {"precision": cheaper, "checkpoint": k - 1}
            return False, (f"it fits, but so does {cheaper} with {k - 1} blocks checkpointed: "
                           "one block's forward less to recompute"), figures
    return True, (f"{p.config.label()} fits ({format_size(p.peak_reserved_bytes)} reserved), "
                  f"and nothing with fewer blocks checkpointed does"), figures


question("16.p1", "size", misconceptions=(
    Misconception(lambda a: a // 2, "AdamW keeps two moments per parameter (exp_avg and "
                  "exp_avg_sq), both made in step 1's optimizer.step(): twice this."),
))
question("16.p2", "size")
question("16.p3", "number", unit="%", misconceptions=(
    Misconception(lambda a: 33, "A whole extra forward is a third of a step when backward costs "
                  "twice the forward, but only the blocks' forward is recomputed (not the "
                  "embedding or the logits), and non-reentrant checkpointing stops recomputing "
                  "once backward has what it needs."),
))
