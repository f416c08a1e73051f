"""CUDA-graph pools at server start-up: what vLLM estimates, and what the caching allocator reserves.

Models two things vLLM's V1 GPU model runner does with CUDA graphs
(``vllm/v1/worker/gpu_model_runner.py``):

* ``profile_cudagraph_memory`` (the estimate): capture the two LARGEST capture sizes into a
  temporary pool, read the drop in ``cudaMemGetInfo`` free memory around each, and extrapolate
  linearly: ``first + max(second, 1 MiB) x (number of sizes - 1)``. The graphs are then thrown
  away and the cache emptied.
* ``capture_model`` (the real thing): capture every size, largest first, into ONE shared pool
  (``graph_pool_handle()``). Each graph's output is kept only as a weak reference, so its memory
  returns to the pool and the next, smaller capture can reuse it. ``keep_outputs=True`` keeps
  every output alive instead (a runner that holds static output buffers): then the pool grows
  with every size and the linear estimate can fall short.

What a capture allocates comes from a real torch forward pass recorded on the CPU with
``gml.capture`` (one trace per batch size); the allocations and frees after the trace's prelude
(weights and the input, which live outside the pool) are replayed inside
``with gpu.graph(g, pool=handle):`` on a :class:`~gpumemlab.devices.simulated.SimulatedGPU`, so
the pool's reserved size is decided by the caching allocator's own rules (rounding, 2 MiB and
20 MiB segments, block reuse within the private pool). Not modelled: cuBLAS workspaces and other
memory a kernel takes outside the allocator, and the driver's own memory per graph.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.units import MiB

MIN_PER_GRAPH = 1 * MiB     # vLLM's floor per extra graph ("driver overhead")


def forward_events(module, make_input, size: int) -> tuple:
    """Record ``module(make_input(size))`` on the CPU; return its ``(action, key, nbytes)`` events.

    Only what the forward pass itself allocates and frees is kept (``"alloc"`` / ``"free"``);
    weights and the input existed before and are left out, as a captured graph finds them in
    place. Tensors still alive at the end (the output) get no free event.
    """
    import torch

    from gpumemlab.recordings.capture import capture
    x = make_input(size)
    with torch.inference_mode(), capture(module, frames=False) as rec:
        out = module(x)
    del out
    return capture_events(rec)


def capture_events(rec) -> tuple:
    """A ``gml.capture`` Capture's allocations and completed frees as ``(action, key, nbytes)``."""
    events = []
    for entry in rec.entries:
        if entry["action"] == "alloc":
            events.append(("alloc", entry["addr"], entry["size"]))
        elif entry["action"] == "free_completed":
            events.append(("free", entry["addr"], entry["size"]))
    return tuple(events)


class ForwardTraces:
    """``traces(size)`` -> the forward pass's events at batch ``size``, recorded once per size."""

    def __init__(self, module, make_input):
        self.module, self.make_input = module, make_input
        self._cache: dict = {}

    def __call__(self, size: int) -> tuple:
        if size not in self._cache:
            self._cache[size] = forward_events(self.module, self.make_input, size)
        return self._cache[size]


def run_events(gpu, events, kept: list | None = None) -> tuple[int, int]:
    """Make the allocations and frees of ``events`` on ``gpu``; free what is left at the end,
    or append it to ``kept`` (a list) to keep it alive.

    Returns ``(peak allocated increase, peak reserved increase)`` in bytes over the start.
    """
    live = {}
    base_alloc, base_res = gpu.memory_allocated(), gpu.memory_reserved()
    peak_alloc = peak_res = 0
    for action, key, nbytes in events:
        if action == "alloc":
            live[key] = gpu.empty(nbytes)
            peak_alloc = max(peak_alloc, gpu.memory_allocated() - base_alloc)
            peak_res = max(peak_res, gpu.memory_reserved() - base_res)
        else:
            block = live.pop(key, None)
            if block is not None:
                block.free()
    if kept is not None:
        kept.extend(live.values())
    else:
        for block in live.values():  # the output: vLLM keeps only a weak reference to it
            block.free()
    return peak_alloc, peak_res


def _capture_one(gpu, events, pool, kept=None):
    """Capture one graph into ``pool``; return (graph, drop in driver free memory)."""
    graph = gpu.CUDAGraph()
    free_before = gpu.mem_get_info()[0]
    with gpu.graph(graph, pool=pool):
        run_events(gpu, events, kept)
    return graph, free_before - gpu.mem_get_info()[0]


@dataclass
class GraphPool:
    """The graphs of every capture size, captured largest first into one shared pool."""

    sizes: tuple                 # capture sizes, largest first
    reserved_bytes: int          # what the shared pool holds after the last capture
    increments: tuple            # drop in free memory around each capture, same order as sizes
    estimate_bytes: int          # vLLM's linear estimate for the same sizes
    first_bytes: int             # the estimate's parts: the largest capture alone ...
    per_graph_bytes: int         # ... and the second capture's increment (at least 1 MiB)
    graphs: list = field(default_factory=list, repr=False)
    outputs: list = field(default_factory=list, repr=False)   # kept outputs (keep_outputs=True)

    @property
    def error_bytes(self) -> int:
        """Estimate minus what the allocator reserved (> 0: the estimate gave KV memory away)."""
        return self.estimate_bytes - self.reserved_bytes


def vllm_estimate(gpu, traces, sizes, *, keep_outputs: bool = False) -> tuple[int, int, int]:
    """vLLM's ``profile_cudagraph_memory`` on ``gpu``: ``(estimate, first, per_graph)`` in bytes.

    The two largest sizes are captured into a temporary pool, then released with their graphs.
    """
    order = sorted(set(sizes), reverse=True)
    if not order:
        return 0, 0, 0
    pool = gpu.graph_pool_handle()
    samples, graphs, kept = [], [], ([] if keep_outputs else None)
    for size in order[:2]:
        graph, grew = _capture_one(gpu, traces(size), pool, kept)
        graphs.append(graph)
        samples.append(grew)
    for block in kept or ():
        block.free()
    for graph in graphs:
        graph.reset()
    gpu.empty_cache()
    first = samples[0]
    per_graph = max(samples[1] if len(samples) > 1 else 0, MIN_PER_GRAPH)
    return first + per_graph * (len(order) - 1), first, per_graph


def capture_all(gpu, traces, sizes, *, estimate: tuple | None = None,
                keep_outputs: bool = False) -> GraphPool:
    """Capture every size, largest first, into one shared pool on ``gpu`` (vLLM ``capture_model``).

    ``estimate`` is ``vllm_estimate``'s result if already taken; else it is computed first.
    ``keep_outputs``: each graph keeps its output alive (a runner holding static output buffers)
    instead of vLLM's weak reference. Raises the simulated GPU's ``OutOfMemoryError`` if a
    capture does not fit.
    """
    if estimate is None:
        estimate = vllm_estimate(gpu, traces, sizes, keep_outputs=keep_outputs)
    order = tuple(sorted(set(sizes), reverse=True))
    pool = gpu.graph_pool_handle()
    free_before = gpu.mem_get_info()[0]
    graphs, increments, kept = [], [], ([] if keep_outputs else None)
    for size in order:
        graph, grew = _capture_one(gpu, traces(size), pool, kept)
        graphs.append(graph)
        increments.append(grew)
    reserved = free_before - gpu.mem_get_info()[0]
    return GraphPool(order, reserved, tuple(increments), estimate[0], estimate[1], estimate[2],
                     graphs, kept or [])


def graph_pool(traces, sizes, *, total_memory="80GiB", alloc_conf: str = "",
               keep_outputs: bool = False) -> GraphPool:
    """The shared graph pool of ``sizes`` on an otherwise empty simulated GPU, beside the estimate.

    ``traces`` is a :class:`ForwardTraces` (or any ``size -> events`` callable).
    """
    from gpumemlab.devices.simulated import SimulatedGPU
    sizes = check_sizes(sizes)
    gpu = SimulatedGPU(total_memory, alloc_conf=alloc_conf, record_history=False,
                       record_frames=False)
    return capture_all(gpu, traces, sizes, keep_outputs=keep_outputs)


def check_sizes(sizes) -> tuple:
    """``sizes`` as a tuple of positive ints, or a one-line ValueError."""
    sizes = tuple(sizes)
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"capture sizes must be positive ints, got {s!r}")
    return sizes


def vllm_capture_sizes(max_size: int = 512) -> tuple:
    """vLLM's default capture sizes up to ``max_size``: 1, 2, 4, then 8 to 256 by 8, then by 16."""
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return tuple(s for s in sizes if s <= max_size)
