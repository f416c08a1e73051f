"""CudaGPU's pinned host memory through torch, checked without a card.

A fake card stands in for torch.cuda (every call CudaGPU makes, recorded); pinned tensors are
plain CPU tensors. ``_record_memory_history`` comes in two signatures: 2.13's (the installed
one: no ``record_pinned_host_memory``) and 2.14's, whose parameters are read from
torch/cuda/memory.py after pytorch/pytorch#182407 (``..., skip_actions=None,
record_pinned_host_memory=False, record_cuda=True``). The snapshot ``_snapshot()`` returns is the
simulator's with its host keys: the shape docs/ALLOCATOR.md gives for 2.14's ``host_segments``
and ``host_traces``.
"""
import copy
import inspect
import sys

import pytest
import torch

from gpumemlab.devices.cuda import CudaGPU
from gpumemlab.devices.cuda_host import HostRecordingUnavailable, host_features
from gpumemlab.devices.simulated import SimulatedGPU

MiB = 1 << 20


class _Over:
    """``real`` with some attributes replaced."""

    def __init__(self, real, **over):
        self._real = real
        self.__dict__.update(over)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _record_2_13(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                 device=None, clear_history=False, compile_context=False,
                 global_record_annotations=False, skip_actions=None):
    raise AssertionError("replaced per card")


def _record_2_14(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                 device=None, clear_history=False, compile_context=False,
                 global_record_annotations=False, skip_actions=None,
                 record_pinned_host_memory=False, record_cuda=True):
    raise AssertionError("replaced per card")


def _recorded_snapshot():
    """A snapshot with device 0 and 1 segments and the host part of three pins."""
    sim = SimulatedGPU("1GiB", record_pinned_host_memory=True)
    keep = [sim.pin(40 * MiB), sim.pin(3 * MiB)]
    sim.pin(MiB).free()
    keep.append(sim.empty(2 * MiB))
    snap = sim.snapshot()
    other = copy.deepcopy(snap["segments"][0])
    other["device"] = 1
    snap["segments"].append(other)
    assert snap["host_segments"] and snap["host_traces"]
    return snap


class FakeCard:
    """torch with torch.cuda faked: records history calls, empty(pin_memory=...) and stats."""

    def __init__(self, monkeypatch, record_signature, snapshot):
        self.history, self.pinned_calls, self.emptied = [], [], 0
        self.snapshot = snapshot
        card = self

        def record(*args, **kwargs):
            bound = inspect.signature(record_signature).bind(*args, **kwargs)
            card.history.append(dict(bound.arguments))

        record.__signature__ = inspect.signature(record_signature)

        def empty(*size, dtype=None, pin_memory=False, **kw):
            card.pinned_calls.append(pin_memory)
            return torch.empty(*size, dtype=dtype)

        def empty_host_cache():
            card.emptied += 1

        props = _Over(object(), name="Fake H200", total_memory=16 << 30)
        memory = _Over(torch.cuda.memory, _record_memory_history=record,
                       _snapshot=lambda: copy.deepcopy(card.snapshot),
                       host_memory_stats=lambda: {"allocated_bytes.current": 77 * MiB,
                                                  "active_requests.current": 2})
        cuda = _Over(torch.cuda, is_available=lambda: True, device_count=lambda: 1,
                     get_device_properties=lambda i: props, empty_cache=lambda: None,
                     mem_get_info=lambda i: (15 << 30, 16 << 30),
                     memory_reserved=lambda dev=None: 0, synchronize=lambda dev=None: None,
                     set_per_process_memory_fraction=lambda f, dev=None: None, memory=memory)
        self.torch = _Over(torch, cuda=cuda, empty=empty,
                           accelerator=_Over(torch.accelerator,
                                             empty_host_cache=empty_host_cache))
        monkeypatch.setitem(sys.modules, "torch", self.torch)


def test_the_installed_torch_says_it_cannot_record_the_host():
    features = host_features(torch)
    has = "record_pinned_host_memory" in inspect.signature(
        torch.cuda.memory._record_memory_history).parameters
    assert features.recording is has
    if not has:     # torch 2.13 (the kit's pin)
        assert "2.14" in features.missing and torch.__version__ in features.missing


def test_a_2_13_card_refuses_host_recording_before_taking_anything(monkeypatch):
    card = FakeCard(monkeypatch, _record_2_13, _recorded_snapshot())
    with pytest.raises(HostRecordingUnavailable, match="record_pinned_host_memory.*2.14"):
        CudaGPU("1GiB", record_pinned_host_memory=True)
    assert card.history == []        # nothing recorded, nothing capped
    gpu = CudaGPU("1GiB")            # without the host: as before
    assert "record_pinned_host_memory" not in card.history[-1]
    gpu.close()


def test_a_2_14_card_records_the_host_and_snapshot_keeps_torchs_host_keys(monkeypatch):
    snap = _recorded_snapshot()
    card = FakeCard(monkeypatch, _record_2_14, snap)
    gpu = CudaGPU("1GiB", record_pinned_host_memory=True)
    assert card.history[-1]["record_pinned_host_memory"] is True
    got = gpu.snapshot()
    assert [s["device"] for s in got["segments"]] == [0]        # this device's segments
    assert got["host_segments"] == snap["host_segments"]        # the process's pinned memory
    assert got["host_traces"] == snap["host_traces"]
    gpu.close()
    assert card.history[-1]["enabled"] is None


def test_pin_stats_and_empty_cache_go_through_torch(monkeypatch):
    card = FakeCard(monkeypatch, _record_2_14, _recorded_snapshot())
    gpu = CudaGPU("1GiB")
    p = gpu.pin("20MiB")
    assert card.pinned_calls == [True] and p.nbytes == 20 * MiB
    assert p.size == 32 * MiB                 # the rounding rule, default settings
    assert p.address == p.tensor.data_ptr()
    assert gpu.host_memory_stats()["active_requests.current"] == 2
    assert gpu.host_pinned_bytes() == 77 * MiB
    gpu.host_empty_cache()
    assert card.emptied == 1
    assert "1 pinned host allocation" in gpu.close() and p.freed


def test_pin_size_follows_the_recorded_round_threshold(monkeypatch):
    snap = _recorded_snapshot()
    snap["allocator_settings"] = dict(snap.get("allocator_settings") or {},
                                      PYTORCH_CUDA_ALLOC_CONF="pinned_max_round_threshold_mb:16")
    FakeCard(monkeypatch, _record_2_14, snap)
    gpu = CudaGPU("1GiB")
    assert gpu.pin(20 * MiB).size == 20 * MiB      # above the threshold: its exact size
    assert gpu.pin(5 * MiB).size == 8 * MiB
    gpu.close()


def test_copy_and_lesson_17s_workload_take_the_pinned_path_on_a_card(monkeypatch):
    """copy_ moves the bytes; offload_activations (lesson 17's gml.experiment workload) pins on a
    CudaGPU as on the simulator, so both runs have the same steps (its synchronize included)."""
    from gpumemlab.lessons.memory_beyond_the_gpu import offload_activations

    card = FakeCard(monkeypatch, _record_2_14, _recorded_snapshot())
    gpu = CudaGPU("1GiB")
    host, dev = gpu.pin(4096), gpu.empty(4096)
    dev.tensor.fill_(7)
    gpu.copy_(host, dev)
    assert int(host.tensor.sum()) == 7 * 4096
    with pytest.raises(ValueError, match="copy_ of 4096 bytes into 16"):
        gpu.copy_(gpu.pin(16), dev)
    card.pinned_calls.clear()
    rec = offload_activations(gpu)
    assert card.pinned_calls.count(True) == 4          # one pin per activation
    sim = offload_activations(SimulatedGPU("1GiB"))
    assert [s["what"] for s in rec.steps] == [s["what"] for s in sim.steps]
    gpu.close()
