"""Paged KV caches: vLLM's PagedAttention memory idea, built in torch and measured in a simulator.

``PagedKVCache`` and ``paged_attention`` hold and read real K/V tensors in fixed-size pages;
``simulate`` serves a synthetic request stream under contiguous (FasterTransformer, Orca) or paged
KV-memory strategies, the contiguous ones placing their buffers with the simulated GPU's caching
allocator; ``compare`` reproduces the paper's waste breakdown, batch sizes, sharing savings and
block-size sweep from one seeded call; ``budget`` sizes a server's KV and CUDA-graph pools at
start-up the way vLLM does and runs the start-up on the simulated GPU. Names resolve lazily, so importing this package does not
import torch, numpy or matplotlib.
"""
from __future__ import annotations

from gpumemlab._lazy import lazy_attributes

_MODULES = {
    "block_table": ("BlockManager", "NoFreeBlocksError", "AppendPlan"),
    "paged_cache": ("PagedKVCache",),
    "attention": ("paged_attention", "gather_kv"),
    "sizing": ("ModelShape", "PRESETS", "kv_bytes_per_token", "kv_budget", "model_shape", "KVBudget"),
    "workloads": ("Workload", "sharegpt_like", "alpaca_like", "make_workload"),
    "simulator": ("simulate", "SimulationResult"),
    "strategies": ("STRATEGIES",),
    "sharing": ("sharing_savings", "SharingResult"),
    "comparison": ("compare", "block_size_sweep", "Comparison"),
    "startup_budget": ("budget", "StartupBudget", "BudgetError"),
    "graph_pools": ("graph_pool", "ForwardTraces", "GraphPool", "vllm_capture_sizes", "run_events"),
    "prefix_workloads": ("prefix_workload", "PrefixWorkload", "PrefixRequest"),
    "prefix_cache": ("HashBlockPool",),
    "radix_cache": ("RadixCache",),
    "prefix_sim": ("simulate_prefix", "PrefixResult"),
    "prefix_figures": ("prefix_sweep", "prefix_figure", "cpu_tier_rows", "sweep_table", "cpu_tier_table"),
    "sleep_mode": ("sleep_wake_cycle", "CuMemEngine", "TrainerStep", "CycleResult", "WakeUpError"),
}
_LAZY = {name: ("." + module, name) for module, names in _MODULES.items() for name in names}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
