"""``budget``: how a vLLM server splits a GPU at start-up, replayed step by step on a simulated card.

Models vLLM 0.29's V1 worker (``vllm/v1/worker/gpu_worker.py``: ``determine_available_memory``
and the ``--kv-cache-memory`` suggestion of ``compile_or_warm_up_model``) and its block count
(``vllm/v1/core/kv_cache_utils.py``: ``get_num_blocks``, ``get_max_concurrency_for_kv_cache_config``):

    requested  = total x gpu_memory_utilization
    non_kv     = weights + profiled activation peak + non-torch memory
    available  = requested - non_kv - graph estimate        (the estimate only if it is applied)
    num_blocks = available // (page_size x layers),  page_size = 2 x block x kv_heads x head x dtype
    max concurrency = num_blocks / ceil(max_model_len / block)
    --kv-cache-memory = requested - non_kv - graph pool actually reserved - 150 MiB

Then the start-up is run on a :class:`~gpumemlab.devices.simulated.SimulatedGPU`: the weights,
the profile run (the activation trace of a real forward pass recorded with ``gml.capture``), the
graph estimate (``graph_pools.vllm_estimate``), the KV cache, the real captures into one shared
pool, and one more eager forward at the largest batch; whatever does not fit is reported with
the step and the shortfall. Not modelled: several KV-cache groups (hybrid models), tensor
parallelism, and the encoder/multimodal budgets.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.units import MiB, format_size, parse_size

from .graph_pools import capture_all, capture_events, check_sizes, run_events, vllm_estimate
from .sizing import dtype_bytes, model_shape

REDUNDANCY_BUFFER = 150 * MiB    # vLLM leaves this much when it suggests --kv-cache-memory


class BudgetError(ValueError):
    """A start-up that cannot work at all; the message is one line saying what and by how much."""


def weight_bytes(weights) -> int:
    """Bytes of ``weights``: an int/size string, or a torch module (parameters and buffers)."""
    if hasattr(weights, "parameters") and hasattr(weights, "buffers"):
        return sum(t.numel() * t.element_size()
                   for t in list(weights.parameters()) + list(weights.buffers()))
    return parse_size(weights, name="weights")


def _activation_events(profile) -> tuple:
    """The profile run's events from bytes, a ``gml.capture`` Capture, or an events tuple."""
    if profile is None:
        return ()
    if getattr(profile, "is_capture", False):
        return capture_events(profile)
    if isinstance(profile, tuple):
        return profile
    nbytes = parse_size(profile, name="activation_peak")
    return (("alloc", 0, nbytes),) if nbytes else ()


@dataclass
class StartupBudget:
    """vLLM's start-up arithmetic beside what the simulated card did (all sizes in bytes)."""

    total_memory: int
    gpu_memory_utilization: float
    requested: int
    weights: int
    activation_peak: int         # profiled torch peak increase of the largest-batch forward
    non_torch: int
    graph_estimate: int          # vLLM's linear estimate (0 without capture sizes)
    estimate_applied: bool
    available_kv: int            # what vLLM gives the KV cache
    page_bytes: int              # one block of one layer, K and V
    num_layers: int
    block_size: int
    num_blocks: int
    max_model_len: int
    graph_reserved: int | None   # what the shared graph pool really reserved (None: not reached)
    capture_sizes: tuple
    peak_used: int | None        # device memory in use at the worst moment after start-up
    failure: str | None          # the step that ran out of memory, with the shortfall
    suggested_kv_memory: int     # --kv-cache-memory that fits the requested budget
    suggested_kv_memory_gpu: int  # ... that fills the card (free memory at start)

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def blocks_per_request(self) -> int:
        return -(-self.max_model_len // self.block_size)

    @property
    def max_concurrency(self) -> float:
        """Requests of ``max_model_len`` tokens the KV blocks hold at once (vLLM's log line)."""
        return self.num_blocks / self.blocks_per_request

    @property
    def fits(self) -> bool:
        """Start-up and a largest-batch forward both fit on the card."""
        return self.failure is None

    @property
    def within_request(self) -> bool:
        """The card's use stays within ``total x gpu_memory_utilization``."""
        return self.fits and self.peak_used is not None and self.peak_used <= self.requested

    def table(self) -> str:
        f = format_size
        rows = [
            ("requested (total x utilization)", f"{f(self.requested)} = {f(self.total_memory)} x "
                                                f"{self.gpu_memory_utilization}"),
            ("weights", f(self.weights)),
            ("activation peak (profile run)", f(self.activation_peak)),
            ("non-torch memory", f(self.non_torch)),
            ("CUDA graphs, vLLM's estimate", f"{f(self.graph_estimate)} ({len(self.capture_sizes)} "
                                             f"sizes, {'applied' if self.estimate_applied else 'not applied'})"),
            ("CUDA graphs, pool reserved", "not reached" if self.graph_reserved is None
             else f(self.graph_reserved)),
            ("KV cache", f"{f(self.available_kv)}: {self.num_blocks:,} blocks, {self.kv_tokens:,} tokens"),
            ("max concurrency", f"{self.max_concurrency:.2f}x at {self.max_model_len:,} tokens"),
            ("peak device use", "n/a" if self.peak_used is None else f(self.peak_used)),
            ("verdict", self.verdict()),
            ("--kv-cache-memory", f"{self.suggested_kv_memory} (fits the request), "
                                  f"{self.suggested_kv_memory_gpu} (fills the card)"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def verdict(self) -> str:
        if self.failure:
            return f"does not fit: {self.failure}"
        if not self.within_request:
            return (f"fits the card, but uses {format_size(self.peak_used - self.requested)} more "
                    f"than requested")
        return "fits"

    def __repr__(self) -> str:
        return (f"StartupBudget({format_size(self.available_kv)} KV, {self.num_blocks} blocks, "
                f"{self.max_concurrency:.2f}x concurrency; {self.verdict()})")


def _check(gpu_memory_utilization, block_size):
    if isinstance(gpu_memory_utilization, bool) or not isinstance(gpu_memory_utilization, (int, float)):
        raise BudgetError(f"gpu_memory_utilization must be a number in (0, 1], "
                          f"not {type(gpu_memory_utilization).__name__}")
    if gpu_memory_utilization > 1:
        raise BudgetError(f"gpu_memory_utilization {gpu_memory_utilization} asks for more than the "
                          f"card: {gpu_memory_utilization - 1:.4g} above 1")
    if gpu_memory_utilization <= 0:
        raise BudgetError(f"gpu_memory_utilization {gpu_memory_utilization} leaves nothing: it "
                          f"must be above 0 (at most 1)")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise BudgetError(f"block_size {block_size!r} holds no token: it must be an int >= 1")


def budget(weights, model="llama-3-8b", *, total_memory="80GiB", gpu_memory_utilization=0.9,
           activation_peak=None, non_torch_memory=0, other_memory=0, capture_sizes=(),
           graph_traces=None, block_size: int = 16, max_model_len: int | None = None,
           estimate_cudagraphs: bool = True, keep_graph_outputs: bool = False, kv_dtype=None,
           alloc_conf: str = "") -> StartupBudget:
    """vLLM's start-up budget for ``weights`` on a ``total_memory`` card, run on the simulator.

    Args:
        weights: bytes (int or "16GiB") or a torch module (its parameters and buffers).
        model: a preset name or ``ModelShape``: layers, KV heads and head size of the KV cache.
        activation_peak: bytes, or a ``gml.capture`` of a forward pass at the largest batch
            (replayed on the simulated card: its peak allocated increase is the profile's peak).
        non_torch_memory: memory the profile run adds outside torch (NCCL buffers, ...).
        other_memory: memory already in use when the server starts (CUDA context, other
            processes); it must fit outside the requested share.
        capture_sizes: CUDA-graph batch sizes; ``graph_traces(size)`` gives each capture's events
            (a :class:`~gpumemlab.kvcache.graph_pools.ForwardTraces`).
        estimate_cudagraphs: subtract vLLM's graph estimate (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``).
        keep_graph_outputs: every graph keeps its output alive (see ``graph_pools.capture_all``).

    Raises:
        BudgetError: one line, for a utilization outside (0, 1], a block size below 1, weights or
            non-KV memory larger than the requested budget, or a KV cache smaller than one request.
    """
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU
    _check(gpu_memory_utilization, block_size)
    shape = model_shape(model)
    total = parse_size(total_memory, name="total_memory")
    other = parse_size(other_memory, name="other_memory")
    non_torch = parse_size(non_torch_memory, name="non_torch_memory")
    w = weight_bytes(weights)
    requested = int(total * gpu_memory_utilization)
    f = format_size
    if other + requested > total:
        raise BudgetError(f"free memory at start ({f(total - other)}) is less than the requested "
                          f"{f(requested)} by {f(other + requested - total)}")
    if w > requested:
        raise BudgetError(f"weights of {f(w)} do not fit in the requested {f(requested)} "
                          f"({gpu_memory_utilization} x {f(total)}) by {f(w - requested)}")
    try:
        sizes = tuple(sorted(set(check_sizes(capture_sizes)), reverse=True))
    except (TypeError, ValueError) as exc:
        raise BudgetError(str(exc)) from None
    if sizes and graph_traces is None:
        raise BudgetError("capture_sizes need graph_traces (e.g. ForwardTraces(module, make_input))")
    max_len = shape.max_seq_len if max_model_len is None else max_model_len
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise BudgetError(f"max_model_len {max_len!r} must be an int >= 1")
    elem = dtype_bytes(shape.dtype if kv_dtype is None else kv_dtype)
    page = 2 * block_size * shape.num_kv_heads * shape.head_dim * elem

    gpu = SimulatedGPU(total, alloc_conf=alloc_conf, record_history=False, record_frames=False,
                       other_memory=other)
    events = _activation_events(activation_peak)
    gpu.allocator.driver.other_bytes += non_torch     # NCCL and friends, held from the start
    hold = [gpu.empty(w)] if w else []
    try:
        peak_act = run_events(gpu, events)[0]
    except OutOfMemoryError as exc:
        raise BudgetError(f"the profile run at the largest batch ran out of memory beside "
                          f"{f(w)} of weights{_shortfall(gpu, exc)}") from None
    gpu.empty_cache()
    estimate = (vllm_estimate(gpu, graph_traces, sizes, keep_outputs=keep_graph_outputs)
                if sizes else (0, 0, 0))
    non_kv = w + peak_act + non_torch
    available = requested - non_kv - (estimate[0] if estimate_cudagraphs else 0)
    if available <= 0:
        raise BudgetError(f"no memory left for the KV cache: weights, activations, non-torch memory"
                          f"{' and the graph estimate' if estimate_cudagraphs and sizes else ''} "
                          f"exceed the requested {f(requested)} by {f(-available)}")
    num_blocks = available // page // shape.num_layers
    need = -(-max_len // block_size)
    if num_blocks < need:
        raise BudgetError(f"one request of {max_len} tokens needs {need} blocks "
                          f"({f(need * page * shape.num_layers)} of KV cache), only {num_blocks} "
                          f"fit: {f((need - num_blocks) * page * shape.num_layers)} short")
    failure, graph_reserved, peak_used = None, None, None
    step = "allocating the KV cache"
    gpu.reset_peak_memory_stats()
    try:
        hold.append(gpu.empty(num_blocks * page * shape.num_layers))
        if sizes:
            step = "capturing the CUDA graphs"
            pool = capture_all(gpu, graph_traces, sizes, estimate=estimate,
                               keep_outputs=keep_graph_outputs)
            graph_reserved = pool.reserved_bytes
            hold.append(pool)
        step = "the first largest-batch forward"
        run_events(gpu, events)
        peak_used = gpu.max_memory_reserved() + gpu.allocator.driver.other_bytes - other
    except OutOfMemoryError as exc:
        failure = f"out of memory while {step}, {f(getattr(exc, 'requested_size', 0) or 0)} asked"
        failure += _shortfall(gpu, exc)
    actual_graphs = estimate[0] if graph_reserved is None else graph_reserved
    suggested = requested - non_kv - actual_graphs - REDUNDANCY_BUFFER
    suggested_gpu = total - other - non_kv - actual_graphs - REDUNDANCY_BUFFER
    return StartupBudget(total, gpu_memory_utilization, requested, w, peak_act, non_torch,
                         estimate[0], bool(estimate_cudagraphs and sizes), available, page,
                         shape.num_layers, block_size, num_blocks, max_len, graph_reserved, sizes,
                         peak_used, failure, suggested, suggested_gpu)


def _shortfall(gpu, exc) -> str:
    asked = getattr(exc, "alloc_size", None) or getattr(exc, "requested_size", None)
    free = getattr(exc, "device_free", None)
    if not asked or free is None:
        return ""
    return f" with {format_size(free)} free on the card" + (
        f" ({format_size(asked - free)} short)" if asked > free else " (the free memory is not in one piece)")
