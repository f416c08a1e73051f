"""The same seeded scenarios on SimulatedGPU and CudaGPU, in this process: identical step
outcomes, allocated/reserved after every step, segment layouts (offsets within segments) and
memory_stats (gpumemlab.devices.compare); a real recording replays on the model with every
address reproduced."""
import pytest

import gpumemlab as gml
from gpumemlab import scenarios
from gpumemlab.devices.compare import compare, summary
from gpumemlab.recordings.replay import replay

BUDGET = "4GiB"


@pytest.fixture
def cuda_gpu():
    gpu = gml.CudaGPU(BUDGET, alloc_conf="expandable_segments:False")
    gpu.empty_cache()
    gpu.reset_peak_memory_stats()
    gpu.reset_accumulated_memory_stats()
    yield gpu
    gpu.close()


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_same_story_on_both_devices(cuda_gpu, name):
    sim = gml.SimulatedGPU(BUDGET, alloc_conf="")
    a = scenarios.SCENARIOS[name](sim)
    b = scenarios.SCENARIOS[name](cuda_gpu)
    assert compare(summary(a), summary(b)) == []


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_real_recording_replays_exactly(cuda_gpu, name):
    rec = scenarios.SCENARIOS[name](cuda_gpu, release=False)
    result = replay(rec.snapshot, total_memory=cuda_gpu.budget)
    assert result.address_mismatches == 0 and result.reproduced, result.start_problems


def test_close_returns_the_memory():
    import torch
    gpu = gml.CudaGPU("1GiB")
    keep = [gpu.empty(64 * 1024 * 1024) for _ in range(4)]
    assert torch.cuda.memory_allocated() >= 4 * 64 * 1024 * 1024
    line = gpu.close()
    assert torch.cuda.memory_allocated() == 0 and torch.cuda.memory_reserved() == 0
    assert all(a.freed for a in keep)
    assert "freed 4 live allocation(s) of 256.00 MiB" in line
