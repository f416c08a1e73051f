"""Sleep mode beside a trainer: the wake-up starved by the caching allocator's cache, and its fixes."""
import pytest

from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.kvcache.sleep_mode import CuMemEngine, TrainerStep, WakeUpError, sleep_wake_cycle
from gpumemlab.units import GiB, MiB


def test_cached_but_unused_memory_starves_the_wake_up():
    r = sleep_wake_cycle("24GiB", weights="6GiB", kv_cache="15GiB", graph_pool="512MiB")
    # after the step the trainer's cache holds params 2 + grads 2 + activations 4 x 3 GiB (the
    # optimizer states reuse freed activation blocks): 16 GiB, beside the 512 MiB graph pool.
    assert r.phases[2][2] == 16 * GiB + 512 * MiB and r.phases[2][3] == 64 * MiB
    # weights (6 GiB) map back into the 7.5 GiB free; the KV cache (15 GiB) finds 1.5 GiB
    assert not r.woke and "waking up kv_cache" in r.failure and "13.50 GiB short" in r.failure


def test_empty_cache_before_wake_frees_all_but_the_pinned_segment():
    r = sleep_wake_cycle("24GiB", empty_cache_before_wake=True)
    # the 64 MiB kept after the step sits in a 3 GiB activation segment: that segment stays
    assert r.released_by_empty_cache == 13 * GiB
    assert r.phases[3][2] == 3 * GiB + 512 * MiB
    assert not r.woke and "512.00 MiB short" in r.failure


def test_expandable_segments_release_the_free_pages_around_the_pinned_tensor():
    r = sleep_wake_cycle("24GiB", empty_cache_before_wake=True, alloc_conf="expandable_segments:True")
    assert r.woke
    # what stays: the graph pool (512 MiB in 20 MiB pages: 520 MiB) and the kept tensor's pages
    assert r.phases[3][2] == 520 * MiB + 80 * MiB


def test_graph_pool_outlives_sleep_and_empty_cache():
    r = sleep_wake_cycle("24GiB", empty_cache_before_wake=True, trainer=TrainerStep(keep=0))
    assert r.graph_pool_bytes == 512 * MiB
    assert r.phases[1][2] == 512 * MiB            # asleep: the engine's graphs still hold it
    assert r.phases[3][2] == 512 * MiB and r.woke


def test_sleep_levels_and_one_line_failure():
    gpu = SimulatedGPU("8GiB", record_history=False, record_frames=False)
    engine = CuMemEngine(gpu)
    engine.allocate("weights", 3 * GiB)
    engine.allocate("kv_cache", 3 * GiB + 1)            # rounded up to 2 MiB granularity
    assert engine.mapped_bytes == 6 * GiB + 2 * MiB
    assert engine.sleep(level=1) == 6 * GiB + 2 * MiB and engine.backup_bytes == 3 * GiB
    engine.wake_up(tags=["weights"])
    assert engine.mapped_bytes == 3 * GiB
    hog = gpu.empty(4 * GiB)
    with pytest.raises(WakeUpError) as info:
        engine.wake_up()
    assert "\n" not in str(info.value) and "1024.00 MiB free" in str(info.value)
    del hog
    assert engine.sleep(level=2) == 3 * GiB and engine.backup_bytes == 0
    with pytest.raises(ValueError):
        engine.sleep(level=3)
