"""The offload lever's known answers: pinned host bytes rounded per tensor as CachingHostAllocator
rounds them (with and without pinned_max_round_threshold_mb), agreeing with lesson 17's simulated
step; optimizer-state offload on fake CPU tensors, derived by hand; a host budget that fails a plan
and names itself; the copy-time table."""
import pytest

from gpumemlab.planner.offload import LINK_SOURCES, LINKS, copy_ms, pinned_total, without_category

MiB = 1 << 20


def test_each_saved_activation_is_rounded_on_its_own():
    # 8 saved activations of 24 MiB: each its own pinned request, each rounded to 32 MiB
    assert pinned_total([24 * MiB] * 8) == 8 * 32 * MiB == 256 * MiB
    # above a 16 MiB round threshold a request is pinned at its size
    assert pinned_total([24 * MiB] * 8, "pinned_max_round_threshold_mb:16") == 192 * MiB
    # per tensor is not the same as all at once: 3 activations of 24 MiB pin 96 MiB each on its
    # own, and would pin 128 MiB as one 72 MiB request
    assert pinned_total([24 * MiB] * 3) == 96 * MiB
    assert pinned_total([3 * 24 * MiB]) == 128 * MiB


def test_planner_and_lesson_17_agree_on_the_pinned_bytes():
    pytest.importorskip("torch")
    from gpumemlab.lessons.memory_beyond_the_gpu import STEP_17, compare_17
    step = compare_17()["offload"]
    assert step["host_peak_bytes"] == pinned_total([STEP_17["act_bytes"]] * STEP_17["layers"])
    assert step["copy_ms"] == copy_ms(step["moved_bytes"])


def test_copy_time_table_names_its_sources():
    assert set(LINKS) == set(LINK_SOURCES)
    ms = copy_ms(63 * 10**9)
    assert ms["PCIe 5 x16"] == pytest.approx(1000.0)
    assert ms["NVLink-C2C"] == pytest.approx(140.0)


def test_without_category_keeps_an_address_reused_by_another_tensor():
    trace = [{"action": "alloc", "addr": 1, "size": 8, "category": "optimizer_state"},
             {"action": "free_requested", "addr": 1, "size": 8},
             {"action": "free_completed", "addr": 1, "size": 8},
             {"action": "alloc", "addr": 1, "size": 8, "category": "activation"},
             {"action": "free_completed", "addr": 1, "size": 8}]
    assert without_category(trace, "optimizer_state").trace == trace[3:]


def _mlp():
    import torch
    return torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])


def _adamw(p):
    import torch
    return torch.optim.AdamW(p)


# AdamW's state for 4 Linear(512, 512) layers, each state tensor its own pinned request: per
# parameter exp_avg and exp_avg_sq (1 MiB per weight, 2 KiB per bias, powers of two already) and
# the step counter (4 bytes, on the device here since fake CPU tensors count as the GPU)
STATES = 4 * 2 * (MiB + 2048) + 8 * 4


def _plan(**kw):
    pytest.importorskip("torch")
    import gpumemlab as gml
    return gml.plan(_mlp, _adamw, (64, 512), context_bytes=64 * MiB, batch_size=64,
                    device="cpu", largest_batch=False, settings=False, **kw)


def test_optimizer_offload_by_hand_and_the_host_budget():
    base = _plan(total_memory=76 * MiB, levers=True)
    assert base.failed == ["device"] and not base.fits
    off = {o.name: o for o in base.levers}["offload optimizer state to CPU"]
    assert off.host_pinned_bytes == STATES
    # gradients out and parameters back each step: 2 x the 1,050,624 fp32 parameters
    assert off.transfer_bytes == 2 * base.params * 4
    assert off.fits and off.peak_allocated_bytes < base.peak_allocated_bytes
    assert "close the 8.00 MiB gap: offload optimizer state to CPU" in base.report()

    fits = _plan(total_memory=76 * MiB, offload="optimizer", host_memory=9 * MiB, levers=False)
    assert fits.fits and fits.failed == [] and fits.host_pinned_bytes == STATES
    assert fits.by_category["optimizer_state"] == 0      # it lives on the host
    short = _plan(total_memory=76 * MiB, offload="optimizer", host_memory="8MiB", levers=False)
    assert not short.fits and short.failed == ["host"]
    assert "DOES NOT FIT: host budget, pins 8.02 MiB of 8.00 MiB" in short.report()
    d = short.as_dict()
    assert d["failed"] == ["host"] and d["host_memory_bytes"] == 8 * MiB
    assert d["host_pinned_bytes"] == STATES and d["offload"] == "optimizer"


def test_bad_offload_input_says_so():
    with pytest.raises(ValueError, match="offload is one of activations, optimizer"):
        _plan(total_memory=76 * MiB, offload="disk")
    with pytest.raises(ValueError, match="fake CUDA"):
        _plan(total_memory=76 * MiB, offload="activations", levers=False)
