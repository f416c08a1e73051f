"""Two allocators on one card: a serving engine's sleep/wake cycle beside a training step.

Models vLLM's sleep mode (``vllm/device_allocator/cumem.py``, ``CuMemAllocator``, vLLM 0.29) as RL
post-training uses it, with the trainer and the engine sharing one GPU:

* the engine's weights and KV cache are mapped by vLLM's own allocator straight from the driver
  (``cuMemCreate`` + ``cuMemMap``, 2 MiB granularity), each allocation tagged ``"weights"`` or
  ``"kv_cache"``; PyTorch's caching allocator never sees them;
* ``sleep(level=1)`` copies the weights to host memory and unmaps everything; ``level=2`` unmaps
  everything and keeps nothing (the weights are reloaded or synced later). Then it calls
  ``torch.cuda.empty_cache()``;
* ``wake_up()`` maps every allocation again with ``cuMemCreate``. That call goes to the driver
  directly: if the caching allocator of the same process (the trainer's) holds memory it does not
  use, nothing asks it to let go, and the wake-up runs out of memory;
* the engine's CUDA graphs live in a private pool of the caching allocator; sleeping does not free
  them (the graphs are alive), and ``empty_cache()`` cannot release a live graph's pool.

The trainer is a sequence of allocations on the caching allocator of the same simulated card
(:class:`TrainerStep`). Not modelled: the time of the copies, NCCL buffers, the newer vLLM option
of capturing graphs into the cuMem pool, and two processes (one process's caching allocator stands
for both; a second process's cache would starve the wake-up the same way).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.units import MiB, format_size, parse_size

GRANULARITY = 2 * MiB            # cuMemCreate's minimum granularity on current GPUs


class WakeUpError(RuntimeError):
    """cuMemCreate failed: the engine cannot map its memory back. One line, with the shortfall."""


class CuMemEngine:
    """The engine's memory through vLLM's CuMemAllocator: tagged mappings taken from the driver."""

    def __init__(self, gpu):
        self.gpu = gpu
        self._driver = gpu.allocator.driver
        self.allocations = []        # [tag, nbytes, mapped, has host backup]

    @property
    def mapped_bytes(self) -> int:
        return sum(a[1] for a in self.allocations if a[2])

    @property
    def backup_bytes(self) -> int:
        return sum(a[1] for a in self.allocations if a[3])

    def allocate(self, tag: str, nbytes) -> None:
        n = -(-parse_size(nbytes, name="nbytes") // GRANULARITY) * GRANULARITY
        self._map(n, f"allocating {tag}")
        self.allocations.append([tag, n, True, False])

    def _map(self, n: int, what: str) -> None:
        free = self._driver.mem_get_info()[0]
        if n > free:
            raise WakeUpError(f"cuMemCreate out of memory while {what}: {format_size(n)} asked, "
                              f"{format_size(free)} free, {format_size(n - free)} short")
        self._driver.other_bytes += n

    def sleep(self, level: int = 1) -> int:
        """Unmap everything (level 1 backs the weights up on the host first); returns bytes freed."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level!r}")
        freed = 0
        for a in self.allocations:
            if a[2]:
                a[3] = level == 1 and a[0] == "weights"
                a[2] = False
                self._driver.other_bytes -= a[1]
                freed += a[1]
        self.gpu.empty_cache()       # vLLM's sleep ends with torch.cuda.empty_cache()
        return freed

    def wake_up(self, tags=None) -> None:
        """Map the allocations (of ``tags``, default all) again, in the order they were made."""
        for a in self.allocations:
            if not a[2] and (tags is None or a[0] in tags):
                self._map(a[1], f"waking up {a[0]}")
                a[2] = True


@dataclass
class TrainerStep:
    """One training step on the caching allocator, then its states offloaded to the host.

    The order: parameters loaded, ``activations`` allocated one by one (forward), gradients
    allocated and activations freed in reverse (backward), optimizer states (``optimizer_factor``
    x parameters, Adam's two moments by default), then ``keep`` bytes that stay on the GPU after
    the step (e.g. log-probs kept for the next rollout; a tuple of sizes keeps one tensor of
    each, allocated in that order), then parameters, gradients and optimizer
    states freed (offloaded). The caching allocator keeps what was freed, as cache.
    """

    params: int = 2 << 30
    activations: tuple = (3 << 30,) * 4
    optimizer_factor: int = 2
    keep: int = 64 * MiB

    def run(self, gpu) -> list:
        """Run the step on ``gpu``; return the allocations that stay (``keep``)."""
        params = gpu.empty(self.params)
        acts = [gpu.empty(a) for a in self.activations]
        grads = gpu.empty(self.params)
        for a in reversed(acts):
            a.free()
        states = [gpu.empty(self.params) for _ in range(self.optimizer_factor)]
        keep = self.keep if isinstance(self.keep, tuple) else (self.keep,)
        kept = [gpu.empty(n) for n in keep if n]
        for t in [params, grads] + states:
            t.free()
        return kept


@dataclass
class CycleResult:
    """Phases of one sleep/train/wake cycle; sizes in bytes."""

    total_memory: int
    alloc_conf: str
    level: int
    empty_cache_before_wake: bool
    phases: list = field(default_factory=list)  # (name, engine mapped, torch reserved, torch allocated, free)
    failure: str | None = None
    graph_pool_bytes: int = 0
    released_by_empty_cache: int = 0

    @property
    def woke(self) -> bool:
        return self.failure is None

    def table(self) -> str:
        f = format_size
        lines = [f"{'phase':<28}{'engine (cuMem)':>16}{'torch reserved':>16}{'torch in use':>16}{'free':>14}"]
        for name, engine, reserved, allocated, free in self.phases:
            lines.append(f"{name:<28}{f(engine):>16}{f(reserved):>16}{f(allocated):>16}{f(free):>14}")
        lines.append("wake-up: " + ("ok" if self.woke else self.failure))
        return "\n".join(lines)

    def __repr__(self) -> str:
        how = (f"level {self.level}, {'empty_cache() before wake' if self.empty_cache_before_wake else 'no empty_cache()'}"
               f", {self.alloc_conf or 'default segments'}")
        return f"CycleResult({how}: {'woke up' if self.woke else self.failure})"


def sleep_wake_cycle(total_memory="24GiB", *, weights="6GiB", kv_cache="15GiB", graph_pool="512MiB",
                     trainer: TrainerStep | None = None, level: int = 1,
                     empty_cache_before_wake: bool = False, alloc_conf: str = "") -> CycleResult:
    """Engine up, engine asleep, one trainer step, (``empty_cache()``), engine wakes up."""
    from gpumemlab.devices.simulated import SimulatedGPU
    gpu = SimulatedGPU(total_memory, alloc_conf=alloc_conf, record_history=False, record_frames=False)
    trainer = TrainerStep() if trainer is None else trainer
    result = CycleResult(gpu.total_memory, alloc_conf, level, empty_cache_before_wake)

    def note(name):
        result.phases.append((name, engine.mapped_bytes, gpu.memory_reserved(),
                              gpu.memory_allocated(), gpu.mem_get_info()[0]))

    engine = CuMemEngine(gpu)
    engine.allocate("weights", weights)
    engine.allocate("kv_cache", kv_cache)
    graph = gpu.CUDAGraph()
    pool_bytes = parse_size(graph_pool, name="graph_pool")
    if pool_bytes:
        before = gpu.memory_reserved()
        with gpu.graph(graph):
            gpu.empty(pool_bytes).free()        # the capture's activations, kept in the pool
        result.graph_pool_bytes = gpu.memory_reserved() - before
    note("engine up (graphs captured)")
    engine.sleep(level)
    note(f"engine asleep (level {level})")
    kept = trainer.run(gpu)
    note("trainer step done")
    if empty_cache_before_wake:
        reserved = gpu.memory_reserved()
        gpu.empty_cache()
        result.released_by_empty_cache = reserved - gpu.memory_reserved()
        note("empty_cache()")
    try:
        engine.wake_up()
        note("engine awake")
    except WakeUpError as exc:
        result.failure = str(exc)
    del kept, graph
    return result
