"""The same seeded scenarios on SimulatedGPU and CudaGPU: identical memory_stats and segment maps
(addresses aside); a real recording replays on the model with every address reproduced."""
import pytest

import gpumemlab as gml
from gpumemlab import scenarios
from gpumemlab.recordings.replay import replay

BUDGET = "4GiB"
# stats that depend on the driver or the process, not on the allocator's decisions
_IGNORED = ("num_sync_all_streams", "num_device_alloc", "num_device_free", "requested_bytes")


def _comparable(stats):
    return {k: v for k, v in stats.items() if not k.startswith(_IGNORED)}


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
    assert [s["ok"] for s in a.steps] == [s["ok"] for s in b.steps]
    assert a.segment_map() == b.segment_map()
    assert _comparable(a.stats) == _comparable(b.stats)


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_real_recording_replays_exactly(cuda_gpu, name):
    rec = scenarios.SCENARIOS[name](cuda_gpu, release=False)
    result = replay(rec.snapshot)
    assert result.address_mismatches == 0 and result.reproduced, result.start_problems


def test_close_returns_the_memory():
    import torch
    gpu = gml.CudaGPU("1GiB")
    keep = [gpu.empty(64 * 1024 * 1024) for _ in range(4)]
    assert torch.cuda.memory_allocated() >= 4 * 64 * 1024 * 1024
    gpu.close()
    assert torch.cuda.memory_allocated() == 0 and torch.cuda.memory_reserved() == 0
    assert all(a.freed for a in keep)
