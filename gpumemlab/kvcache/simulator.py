"""``simulate``: serve a synthetic request stream under one KV-memory strategy and measure it.

Models the experiment behind vLLM's Fig. 2 and Fig. 13 (§3.1, §6.2): decode step by step with
continuous batching (Orca, vLLM) or static batching (FasterTransformer), and record where the KV
memory goes (see ``accounting`` for the categories), how many requests run concurrently, tokens
per step and preemptions. One decode step is the unit of time; every running request produces one
token per step. Not modelled: compute time, prefill cost, swapping to CPU, and the batch's token
budget (``max_num_batched_tokens``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.units import format_size, parse_size

from .accounting import CATEGORIES
from .sim_contiguous import run_contiguous
from .sim_paged import run_paged
from .sizing import model_shape
from .strategies import LABELS, STRATEGIES, check_strategy
from .workloads import Workload

_NAMES = {"token_states": "token states", "reserved": "reserved", "internal_fragmentation":
          "internal frag.", "external_fragmentation": "external frag.", "unused": "unused"}


@dataclass
class SimulationResult:
    """What one ``simulate`` run measured. Shares are fractions of KV memory, time-averaged."""

    strategy: str
    workload: str
    num_requests: int
    kv_memory_bytes: int
    bytes_per_token: int
    block_size: int | None
    shares: dict                 # category -> fraction, saturated window (all steps if none)
    shares_all_steps: dict       # category -> fraction, every step with a request running
    mean_batch_size: float       # concurrent requests, saturated window
    mean_batch_size_all_steps: float
    max_batch_size: int
    steps: int
    tokens_per_step: float       # generated tokens per decode step, whole run
    prefill_tokens: int
    recomputed_tokens: int
    preemptions: int
    failed_allocations: int      # allocator OOMs that made a request wait (contiguous strategies)
    saturated_steps: int
    mean_cached_free_bytes: float  # reserved but unallocated in the caching allocator, saturated
    snapshot: dict | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        text = LABELS[self.strategy]
        return f"{text}, block {self.block_size}" if self.block_size else text

    @property
    def token_states(self) -> float:
        return self.shares["token_states"]

    @property
    def waste(self) -> float:
        """Share of KV memory not holding token states."""
        return 1.0 - self.shares["token_states"]

    def table(self) -> str:
        """One text row per category, in percent."""
        lines = [f"{self.label} on {self.workload} ({self.num_requests} requests, "
                 f"{format_size(self.kv_memory_bytes)} KV memory)"]
        for c in CATEGORIES:
            lines.append(f"  {_NAMES[c]:<15} {100 * self.shares[c]:6.1f} %")
        lines.append(f"  mean batch      {self.mean_batch_size:8.2f} requests (max {self.max_batch_size})")
        lines.append(f"  tokens/step     {self.tokens_per_step:8.2f}; preemptions {self.preemptions}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"SimulationResult({self.label}: token states {100 * self.token_states:.1f}%, "
                f"mean batch {self.mean_batch_size:.2f}, preemptions {self.preemptions})")


def simulate(strategy: str, workload, kv_memory="12GiB", *, model="opt-13b", block_size: int = 16,
             max_num_seqs: int = 256, watermark: float = 0.01, alloc_conf: str = "",
             keep_snapshot: bool = False) -> SimulationResult:
    """Serve ``workload`` under ``strategy`` with ``kv_memory`` bytes of KV cache.

    Args:
        strategy: one of ``STRATEGIES``: "static", "orca-max", "orca-pow2", "orca-oracle", "paged".
        workload: a :class:`~gpumemlab.kvcache.workloads.Workload` (``sharegpt_like(...)``).
        kv_memory: bytes for the KV cache ("12GiB" is the paper's OPT-13B on an A100-40GB).
        model: preset name or ModelShape; gives the bytes per token (800 KiB for OPT-13B).
        block_size: tokens per block (paged only).
        max_num_seqs: cap on concurrent requests (vLLM's default 256).
        watermark: share of blocks the paged scheduler keeps free when admitting.
        alloc_conf: PYTORCH_CUDA_ALLOC_CONF for the simulated GPU (contiguous strategies).
        keep_snapshot: keep the caching allocator's final snapshot (contiguous strategies).

    Raises:
        ValueError: for an unknown strategy, or a kv_memory too small for one request.
    """
    key = check_strategy(strategy)
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload (e.g. sharegpt_like(1000)), not {type(workload).__name__}")
    kv_bytes = parse_size(kv_memory, name="kv_memory")
    bytes_per_token = model_shape(model).kv_bytes_per_token
    for value, name in ((block_size, "block_size"), (max_num_seqs, "max_num_seqs")):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if not 0 <= watermark < 1:
        raise ValueError(f"watermark must be in [0, 1), got {watermark}")
    if key == "paged":
        out = run_paged(workload, kv_bytes, bytes_per_token, block_size=block_size,
                        max_num_seqs=max_num_seqs, watermark=watermark)
    else:
        out = run_contiguous(key, workload, kv_bytes, bytes_per_token, max_num_seqs=max_num_seqs,
                             alloc_conf=alloc_conf)
    acc = out["acc"]
    window = "saturated" if acc.steps("saturated") else "all"
    snapshot = out["memory"].snapshot() if keep_snapshot and out["memory"] is not None else None
    return SimulationResult(
        strategy=key, workload=workload.name, num_requests=len(workload), kv_memory_bytes=kv_bytes,
        bytes_per_token=bytes_per_token, block_size=block_size if key == "paged" else None,
        shares=acc.shares(window), shares_all_steps=acc.shares("all"),
        mean_batch_size=acc.mean(window, "batch"), mean_batch_size_all_steps=acc.mean("all", "batch"),
        max_batch_size=out["max_batch"], steps=out["steps"],
        tokens_per_step=out["decode_tokens"] / out["steps"] if out["steps"] else 0.0,
        prefill_tokens=out["prefill_tokens"], recomputed_tokens=out.get("recomputed_tokens", 0),
        preemptions=out["preemptions"], failed_allocations=out["failed_allocations"],
        saturated_steps=acc.steps("saturated"), mean_cached_free_bytes=acc.mean(window, "cached_free"),
        snapshot=snapshot)


__all__ = ["simulate", "SimulationResult", "STRATEGIES"]
