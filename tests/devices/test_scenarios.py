"""Seeded scenarios: the fragmentation story, batch growth, a training step, on SimulatedGPU."""
import gpumemlab as gml
from gpumemlab import scenarios

GiB = 1024**3


def test_fragmentation_oom_fails_with_most_memory_free():
    gpu = gml.SimulatedGPU("24GiB", alloc_conf="")
    rec = scenarios.fragmentation_oom(gpu)
    chunk = rec.notes["chunk"]
    assert chunk == 24 * GiB // 16
    assert rec.oom is not None and "out of memory" in rec.oom
    assert rec.oom_request == 3 * chunk
    # free memory (holes + device) is far more than the failed request
    assert rec.free_at_oom == 9 * chunk > rec.oom_request
    assert rec.stats["num_ooms"] == 1
    # the holes are inactive blocks inside the one big segment
    (seg,) = [s for s in rec.segment_map() if s[1] == 14 * chunk]
    assert [state for _size, state in seg[2]].count("inactive") == 7
    assert gpu.memory_allocated() == 0            # released at the end


def test_expandable_segments_avoid_it():
    rec = scenarios.fragmentation_oom(gml.SimulatedGPU("24GiB", alloc_conf="expandable_segments:True"))
    assert rec.oom is None and all(s["ok"] for s in rec.steps)


def test_batch_growth_stops_at_a_computed_batch_and_is_seeded():
    a = scenarios.batch_growth(gml.SimulatedGPU("16GiB", alloc_conf=""), seed=3)
    b = scenarios.batch_growth(gml.SimulatedGPU("16GiB", alloc_conf=""), seed=3)
    assert a.steps == b.steps and a.oom is not None
    assert a.notes["last_good_batch"] == a.notes["oom_batch"] - 1 >= 1
    # the batch that failed really did not fit: weights + its activations exceed the device
    need = a.notes["weights"] + a.notes["per_sample_bytes"] * a.notes["oom_batch"]
    assert need > 16 * GiB * 0.5


def test_train_step_like_keeps_params_and_optimizer_state():
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    rec = scenarios.train_step_like(gpu, release=False, steps=2)
    assert rec.oom is None
    params = sum(s["nbytes"] for s in rec.steps if s["what"].startswith("parameter"))
    state = sum(s["nbytes"] for s in rec.steps if s["what"].startswith("optimizer state"))
    assert state == 2 * params
    # at the end only parameters and optimizer state are live
    assert gpu.memory_stats()["requested_bytes.all.current"] == params + state
