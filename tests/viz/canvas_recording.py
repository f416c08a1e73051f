"""A seeded simulated-GPU recording for the browser block map's tests and benchmark: random
allocations of five size classes (small pool and large), random frees (more likely the more is
live: about 40 tensors stay alive), an ``empty_cache`` every 2,000 operations, so segments come
and go; frames recorded (the learner's defaults)."""
from __future__ import annotations

import random

SIZES = (512, 70_000, 3 << 20, 40 << 20, 300 << 20)


def recording(n_ops: int, seed: int = 5, alloc_conf=None) -> dict:
    """The snapshot (segments and the whole trace) after ``n_ops`` operations."""
    import gpumemlab as gml
    gpu = gml.SimulatedGPU("8GiB", alloc_conf, max_entries=4 * n_ops + 1000)
    rng = random.Random(seed)
    live = []
    for i in range(n_ops):
        if live and rng.random() < len(live) / 80:
            live.pop(rng.randrange(len(live))).free()
        else:
            try:
                live.append(gpu.empty(rng.choice(SIZES) + rng.randrange(4096)))
            except gml.OutOfMemoryError:
                pass
        if i % 2000 == 1999:
            gpu.empty_cache()
    return gpu.snapshot()
