"""KV-memory strategies compared in vLLM's paper: how many token slots each reserves per request.

Models the baselines of vLLM §6.1 and FasterTransformer's static batching:

- ``static``: FasterTransformer-like. A batch is formed, every request reserves the model's maximum
  length, and no request joins until the whole batch has finished (request-level batching).
- ``orca-max``: Orca with iteration-level (continuous) batching, reserving the maximum length.
- ``orca-pow2``: Orca knowing the true length but rounding it up to a power of two (at most 2x,
  e.g. 25 -> 32 slots), capped at the maximum length.
- ``orca-oracle``: Orca reserving exactly prompt + output tokens (knows the future).
- ``paged``: vLLM. Fixed-size blocks taken one at a time as the sequence grows; no reservation.

The contiguous strategies place each reservation with the simulated GPU's caching allocator.
"""
from __future__ import annotations

STRATEGIES = {
    "static": "FasterTransformer-like: static batches, each request reserves the maximum length",
    "orca-max": "Orca (Max): continuous batching, each request reserves the maximum length",
    "orca-pow2": "Orca (Pow2): reserves the true length rounded up to a power of two",
    "orca-oracle": "Orca (Oracle): reserves exactly the true prompt + output length",
    "paged": "vLLM: fixed-size KV blocks allocated on demand, no reservation",
}

LABELS = {"static": "Static (FT)", "orca-max": "Orca (Max)", "orca-pow2": "Orca (Pow2)",
          "orca-oracle": "Orca (Oracle)", "paged": "vLLM (paged)"}


def check_strategy(strategy) -> str:
    """The canonical strategy name, or a ValueError naming the choices."""
    if not isinstance(strategy, str):
        raise TypeError(f"strategy must be a string, not {type(strategy).__name__}")
    key = strategy.lower().replace("_", "-").replace(" ", "-")
    key = {"max": "orca-max", "pow2": "orca-pow2", "oracle": "orca-oracle", "vllm": "paged",
           "fastertransformer": "static", "ft": "static"}.get(key, key)
    if key not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {sorted(STRATEGIES)}")
    return key


def reserved_slots(strategy: str, total_lens, max_seq_len: int):
    """Token slots each request reserves under a contiguous strategy (a numpy int64 array).

    ``total_lens`` are the true prompt + output lengths.
    """
    import numpy as np
    total = np.asarray(total_lens, dtype=np.int64)
    if strategy in ("static", "orca-max"):
        return np.full_like(total, max_seq_len)
    if strategy == "orca-pow2":
        pow2 = np.left_shift(1, np.ceil(np.log2(np.maximum(total, 1))).astype(np.int64))
        return np.minimum(pow2, max_seq_len)
    if strategy == "orca-oracle":
        return total.copy()
    raise ValueError(f"strategy {strategy!r} reserves no contiguous slots")
