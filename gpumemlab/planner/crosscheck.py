"""The formulas people plan with, computed for the same model, to print beside the plan.

* **Bytes per parameter** (the Hugging Face estimator's "Adam is about 4x the model", DeepSpeed's
  model-state estimates): weights in their dtype, one gradient each (training), and the optimizer's
  moments in fp32 (Adam and AdamW: 2, SGD with momentum: 1). fp32 AdamW gives 4 + 4 + 8 = 16 bytes
  a parameter. Model states only: no activations, no temporaries, no allocator.
* **Activations, the Ultra-Scale Playbook's formula** for a GPT block stack with 16-bit activations
  and attention scores materialized: ``m_act = L * s * b * h * (34 + 5 * a * s / h)`` bytes
  (``L`` layers, ``s`` sequence, ``b`` batch, ``h`` hidden size, ``a`` heads). It counts what the
  forward saves for backward, per layer, at one moment; it leaves out the embeddings and output
  head (the logits, ``b * s * vocab``, and their softmax), fp32 activations (twice the bytes), the
  temporaries alive beside them, the allocator's rounding, segments and cache.

The difference from the plan is said in words by ``explain``.
"""
from __future__ import annotations

__all__ = ["bytes_per_parameter", "playbook_activations", "crosscheck"]

_MOMENTS = {"Adam": 2, "AdamW": 2, "NAdam": 2, "RAdam": 2, "Adamax": 2, "Adagrad": 1, "RMSprop": 1,
            "Adafactor": 1}


def bytes_per_parameter(params: int, *, weight_bytes: int = 4, training: bool = True,
                        optimizer: str | None = "AdamW", momentum: bool = False) -> dict:
    """The model-state rule: ``{"bytes", "per_parameter", "moments"}``."""
    moments = _MOMENTS.get(optimizer or "", 1 if (optimizer == "SGD" and momentum) else 0)
    per = weight_bytes + ((weight_bytes + 4 * moments) if training else 0)
    return {"bytes": params * per, "per_parameter": per, "moments": moments if training else 0}


def playbook_activations(*, layers: int, seq: int, batch: int, hidden: int, heads: int) -> int:
    """``L*s*b*h*(34 + 5*a*s/h)`` bytes (16-bit activations)."""
    return int(layers * seq * batch * hidden * (34 + 5 * heads * seq / hidden))


def crosscheck(*, params: int, weight_bytes: int, training: bool, optimizer: str | None,
               momentum: bool, planned_peak: int, planned_states: int, planned_activations: int,
               dims: dict | None, batch: int, precision: str | None) -> dict:
    """Both rules for this model, the plan's own figures, and what explains the gap."""
    rule = bytes_per_parameter(params, weight_bytes=weight_bytes, training=training,
                               optimizer=optimizer, momentum=momentum)
    out = {"params": params, "rule": rule, "planned_model_states_bytes": planned_states,
           "planned_peak_allocated_bytes": planned_peak, "playbook": None}
    gap = planned_states - rule["bytes"]
    notes = [f"model states: rule {rule['bytes']:,} B ({rule['per_parameter']} B/param), "
             f"plan {planned_states:,} B (parameters, buffers, gradients and optimizer state as "
             f"traced): " + ("the same" if gap == 0 else
                             f"{gap:+,} B: buffers, optimizer step counters on the device, "
                             f"and what the optimizer keeps that the rule does not count"),
             f"peak: the rule has no activations or temporaries; the plan's peak allocated is "
             f"{planned_peak:,} B, {planned_peak / rule['bytes']:.2f}x the rule"
             if rule["bytes"] else "peak: the rule gives 0 bytes"]
    if dims and all(k in dims for k in ("layers", "seq", "hidden", "heads")):
        m = playbook_activations(layers=dims["layers"], seq=dims["seq"], batch=batch,
                                 hidden=dims["hidden"], heads=dims["heads"])
        scale = 1.0 if precision in ("bf16", "fp16") else 2.0
        out["playbook"] = {"bytes": m, "fp32_bytes": int(m * 2), "assumes": "16-bit activations",
                           "planned_activation_bytes": planned_activations}
        notes.append(f"activations: the formula gives {m:,} B for 16-bit activations"
                     f"{'' if scale == 1 else f' ({int(m * scale):,} B in fp32)'}; the plan has "
                     f"{planned_activations:,} B saved for backward at most, which also holds "
                     f"the embeddings, the logits and their softmax (b*s*vocab each), and layer norm "
                     f"statistics the formula leaves out, and autocast's casts it counts otherwise")
    notes.append("neither rule runs the caching allocator: rounding to 512 B and 2 MiB, segments, "
                 "the cache kept between steps, the first step that differs from the second")
    out["notes"] = notes
    return out
