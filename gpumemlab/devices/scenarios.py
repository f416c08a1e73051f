"""Seeded workloads that fragment GPU memory on purpose, for any device with the torch.cuda-shaped
API (``SimulatedGPU``, ``CudaGPU``): they only call ``gpu.empty(nbytes)``, ``allocation.free()``
and the memory queries, so the same scenario gives the same allocator story on both.

Sizes scale with ``gpu.total_memory`` (a CudaGPU's budget), so a 4 GiB budget and a 24 GiB
simulated card tell the same story. Each returns a :class:`ScenarioRecord` of what happened.

* ``fragmentation_oom``: "plenty free, yet a smaller tensor fails": holes inside a segment that
  still holds live blocks cannot be returned to the driver (c10 ``release_cached_blocks`` frees
  only whole segments), so a request larger than any hole runs out of memory.
* ``batch_growth``: a training loop whose batch grows each step until it no longer fits.
* ``train_step_like``: parameters, then per step activations, gradients, optimizer state and
  temporaries of seeded random sizes, freed in a training step's order.
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

from gpumemlab.allocator.constants import K_ROUND_LARGE
from gpumemlab.units import MiB

from .errors import OutOfMemoryError

__all__ = ["ScenarioRecord", "ScenarioRun", "device_chunk", "fragmentation_oom", "batch_growth",
           "train_step_like", "SCENARIOS"]


@dataclass
class ScenarioRecord:
    """What a scenario did: its steps, the OOM (if any) and the memory figures at the end."""
    name: str
    device: str
    steps: list = field(default_factory=list)    # dicts: step, what, nbytes, ok, allocated, reserved
    oom: str | None = None                         # the OOM message, first line
    oom_request: int | None = None                 # bytes requested when it happened
    free_at_oom: int | None = None                 # reserved-but-unused + device free, then
    stats: dict = field(default_factory=dict)      # memory_stats() just before releasing
    snapshot: dict = field(default_factory=dict)   # snapshot() just before releasing
    notes: dict = field(default_factory=dict)
    held: list = field(default_factory=list, repr=False)  # live allocations (release=False)

    def segment_map(self) -> list:
        """Each segment as (segment_type, total_size, [(block size, state), ...]), addresses aside."""
        return [(s["segment_type"], s["total_size"], [(b["size"], b["state"]) for b in s["blocks"]])
                for s in self.snapshot.get("segments", [])]

    def __repr__(self):
        from gpumemlab.units import format_size
        oom = f"OOM on a {format_size(self.oom_request)} request" if self.oom else "no OOM"
        return f"<ScenarioRecord {self.name} on {self.device}: {len(self.steps)} steps, {oom}>"


def _is_oom(exc) -> bool:
    if isinstance(exc, OutOfMemoryError):
        return True
    torch = sys.modules.get("torch")
    base = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return base is not None and isinstance(exc, base)


class ScenarioRun:
    """Holds a scenario's live allocations and writes its record."""

    def __init__(self, gpu, name):
        self.gpu, self.live = gpu, {}
        self.rec = ScenarioRecord(name=name, device=getattr(gpu, "kind", type(gpu).__name__))

    def alloc(self, key, nbytes, what):
        gpu = self.gpu
        try:
            self.live[key] = gpu.empty(nbytes)
            ok = True
        except Exception as exc:
            if not _is_oom(exc):
                exc.gml_record = self.rec        # a device error: the steps done until then
                raise
            ok = False
            if self.rec.oom is None:
                self.rec.oom = str(exc).splitlines()[0]
                self.rec.oom_request = nbytes
                free_device, _total = gpu.mem_get_info()
                self.rec.free_at_oom = gpu.memory_reserved() - gpu.memory_allocated() + free_device
        self._step(what, nbytes, ok)
        return ok

    def free(self, key, what="free"):
        a = self.live.pop(key)
        nbytes = a.nbytes
        try:
            a.free()
        except Exception as exc:
            exc.gml_record = self.rec
            raise
        self._step(what, -nbytes, True)

    def act(self, what, fn, *args):
        """A step that allocates nothing (``empty_cache()``, a memory fraction): ``fn(*args)``."""
        try:
            fn(*args)
        except Exception as exc:
            exc.gml_record = self.rec
            raise
        self._step(what, 0, True)

    def _step(self, what, nbytes, ok):
        gpu = self.gpu
        self.rec.steps.append({"step": len(self.rec.steps), "what": what, "nbytes": nbytes, "ok": ok,
                               "allocated": gpu.memory_allocated(),
                               "reserved": gpu.memory_reserved()})

    def capture_shared_pool(self, tag, batches, act_bytes, out_bytes, *, keep_outputs=True):
        """Capture one CUDA graph per batch size, in order, into one shared pool
        (``graph_pool_handle``): each capture makes three activations of ``act_bytes`` a sequence
        that die and an output of ``out_bytes`` a sequence, kept alive or released at once (a weak
        reference). Then the kept outputs are freed, the graphs reset and the cache emptied.
        Returns what the pool reserved while the graphs lived (bytes)."""
        gpu = self.gpu
        before = gpu.memory_reserved()
        handle, graphs = gpu.graph_pool_handle(), []
        for b in batches:
            g = gpu.CUDAGraph()
            with gpu.graph(g, pool=handle):
                for i in range(3):
                    self.alloc((tag, b, "act", i), act_bytes * b, f"{tag}, batch {b}: activation {i}")
                self.alloc((tag, b, "out"), out_bytes * b, f"{tag}, batch {b}: output")
                for i in range(3):
                    self.free((tag, b, "act", i), f"{tag}, batch {b}: activation {i} freed")
                if not keep_outputs:
                    self.free((tag, b, "out"), f"{tag}, batch {b}: output released (weak reference)")
            graphs.append(g)
        reserved = gpu.memory_reserved() - before
        if keep_outputs:
            for b in batches:
                self.free((tag, b, "out"), f"{tag}, batch {b}: output freed")
        for g in graphs:
            g.reset()
        del graphs
        self.act(f"{tag}: empty_cache()", gpu.empty_cache)
        return reserved

    def finish(self, release=True):
        self.rec.stats = dict(self.gpu.memory_stats())
        self.rec.snapshot = self.gpu.snapshot()
        if release:
            for key in list(self.live):
                self.live.pop(key).free()
        else:
            self.rec.held = list(self.live.values())   # keep them alive with the record
        return self.rec


def mib_round(n: int) -> int:
    """``n`` rounded down to whole 2 MiB units (kRoundLarge), at least one."""
    return max(2 * MiB, n // (2 * MiB) * (2 * MiB))


def device_chunk(gpu, parts):
    """A large-pool size: capacity / parts, rounded down to 2 MiB (at least 12 MiB)."""
    return max(12 * MiB, (gpu.total_memory // parts) // K_ROUND_LARGE * K_ROUND_LARGE)


def fragmentation_oom(gpu, *, pieces: int = 14, release: bool = True) -> ScenarioRecord:
    """Fill one big segment with ``pieces`` equal tensors, free every other one, then ask for a
    tensor three pieces long: most memory is free, but no hole is big enough.

    Steps: one tensor of ``pieces`` chunks (a chunk is 1/16 of the device), freed (its segment
    stays cached); ``pieces`` chunk tensors carved from that cached segment; every other one
    freed; then the request. ``notes`` holds chunk, hole and free figures.
    """
    run = ScenarioRun(gpu, "fragmentation_oom")
    chunk = device_chunk(gpu, 16)
    run.alloc("big", pieces * chunk, "one big tensor (its segment will be reused)")
    run.free("big", "free it: the segment stays cached")
    for i in range(pieces):
        run.alloc(i, chunk, f"piece {i}")
    for i in range(0, pieces, 2):
        run.free(i, f"free piece {i}: a hole inside a segment that still holds live blocks")
    request = 3 * chunk
    run.alloc("request", request, "a tensor three pieces long")
    run.rec.notes.update(chunk=chunk, holes=(pieces + 1) // 2, hole_bytes=chunk,
                         request=request)
    return run.finish(release)


def batch_growth(gpu, *, start_batch: int = 1, max_steps: int = 40, seed: int = 0,
                 release: bool = True) -> ScenarioRecord:
    """A training loop whose batch grows by one each step: per-sample activations (seeded
    sizes, a few MiB each), then a growing batch until the first OOM. Old and new activation
    sizes interleave, so the cache holds odd-sized free blocks when the OOM comes."""
    rng = random.Random(seed)
    run = ScenarioRun(gpu, "batch_growth")
    unit = max(2 * MiB, gpu.total_memory // 256 // 512 * 512)
    layers = [rng.randint(1, 4) * unit + rng.randrange(0, unit, 512) for _ in range(6)]
    weights = device_chunk(gpu, 8)
    run.alloc("weights", weights, "model weights")
    batch = start_batch
    for step in range(max_steps):
        ok = True
        for i, per_sample in enumerate(layers):
            if not run.alloc(("act", i), per_sample * batch, f"step {step}: activation {i}, batch {batch}"):
                ok = False
                break
        for i in reversed(range(len(layers))):
            if ("act", i) in run.live:
                run.free(("act", i), f"step {step}: backward frees activation {i}")
        if not ok:
            run.rec.notes.update(oom_batch=batch, last_good_batch=batch - 1)
            break
        batch += 1
    run.rec.notes.update(per_sample_bytes=sum(layers), weights=weights)
    return run.finish(release)


def train_step_like(gpu, *, steps: int = 3, layers: int = 8, seed: int = 0,
                    release: bool = True) -> ScenarioRecord:
    """Parameters once; each step: forward activations (kept), a temporary per layer (freed at
    once), backward gradients while activations are freed in reverse, optimizer state created on
    the first step (two per parameter, like Adam), gradients freed by zero_grad."""
    rng = random.Random(seed)
    run = ScenarioRun(gpu, "train_step_like")
    scale = max(1, gpu.total_memory // (4 * 1024 * MiB))       # 1 per 4 GiB
    params = [rng.randint(1, 24) * MiB // 2 * scale + rng.randrange(0, 4096, 4) for _ in range(layers)]
    acts = [rng.randint(2, 40) * MiB // 4 * scale + rng.randrange(0, 4096, 4) for _ in range(layers)]
    for i, n in enumerate(params):
        run.alloc(("p", i), n, f"parameter {i}")
    for step in range(steps):
        for i in range(layers):
            run.alloc(("a", i), acts[i], f"step {step}: activation {i}")
            run.alloc(("t", i), acts[i] // 3 + 512, f"step {step}: temporary {i}")
            run.free(("t", i), f"step {step}: temporary {i} freed")
        run.alloc("loss", 4, f"step {step}: loss")
        for i in reversed(range(layers)):
            run.alloc(("g", i), params[i], f"step {step}: gradient {i}")
            run.free(("a", i), f"step {step}: activation {i} freed by backward")
        run.free("loss", f"step {step}: loss freed")
        for i in range(layers):
            if step == 0:
                run.alloc(("m", i), params[i], f"optimizer state exp_avg {i}")
                run.alloc(("v", i), params[i], f"optimizer state exp_avg_sq {i}")
        for i in range(layers):
            run.free(("g", i), f"step {step}: zero_grad frees gradient {i}")
    return run.finish(release)


SCENARIOS = {"fragmentation_oom": fragmentation_oom, "batch_growth": batch_growth,
             "train_step_like": train_step_like}
