"""Paged KV caches: vLLM's PagedAttention memory idea, built in torch and measured in a simulator.

``PagedKVCache`` and ``paged_attention`` hold and read real K/V tensors in fixed-size pages;
``simulate`` serves a synthetic request stream under contiguous (FasterTransformer, Orca) or paged
KV-memory strategies, the contiguous ones placing their buffers with the simulated GPU's caching
allocator; ``compare`` reproduces the paper's waste breakdown, batch sizes, sharing savings and
block-size sweep from one seeded call. Names resolve lazily, so importing this package does not
import torch, numpy or matplotlib.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "BlockManager": "block_table", "NoFreeBlocksError": "block_table", "AppendPlan": "block_table",
    "PagedKVCache": "paged_cache",
    "paged_attention": "attention", "gather_kv": "attention",
    "ModelShape": "sizing", "PRESETS": "sizing", "kv_bytes_per_token": "sizing",
    "kv_budget": "sizing", "model_shape": "sizing", "KVBudget": "sizing",
    "Workload": "workloads", "sharegpt_like": "workloads", "alpaca_like": "workloads",
    "make_workload": "workloads",
    "simulate": "simulator", "SimulationResult": "simulator", "STRATEGIES": "strategies",
    "sharing_savings": "sharing", "SharingResult": "sharing",
    "compare": "comparison", "block_size_sweep": "comparison", "Comparison": "comparison",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gpumemlab.kvcache' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
