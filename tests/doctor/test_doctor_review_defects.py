"""The defects a fresh-eyes review found in the message doctor, each pinned with a real paste (the
source URL beside it): where max_split_size_mb can help, the context allowance on a small card,
one meaning of "outside PyTorch", other frameworks' own figures, fixes ranked by what the platform
supports, and what an MPS message's figures are."""
import json
import re

import pytest

from gpumemlab.doctor.message import parse_message
from gpumemlab.doctor.message.kind import context_max
from gpumemlab.doctor.message.mode import diagnose_message
from gpumemlab.units import format_size

GiB, MiB = 1 << 30, 1 << 20


def names(d):
    return [f.name for f in d.fixes]


# https://github.com/neurosim/DNN_NeuroSim_V1.3/issues/28 (1.0-1.3: no PYTORCH_CUDA_ALLOC_CONF yet)
NEUROSIM = ("RuntimeError: CUDA out of memory. Tried to allocate 1.12 MiB (GPU 0; 22.37 GiB total "
            "capacity; 15.87 GiB already allocated; 3.56 MiB free; 787.74 MiB cached)")
# https://github.com/pytorch/pytorch/issues/16417 (2.1+, a 22 MiB request: under max_split_size's
# 20 MiB floor? no: above it, so it may help)
TORCH_16417 = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 "
               "has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch "
               "memory, this process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB "
               "is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated.")


def test_max_split_size_is_offered_only_where_c10_applies_it():
    d = diagnose_message(NEUROSIM)
    assert d.kind == "fragmentation"
    assert "max_split_size_mb" not in names(d)
    assert any(line.startswith("max_split_size_mb: PyTorch 1.0-1.3") for line in
               d.details["left_out"])
    # the same figures in the 2.1+ form: a 2 MiB allocation is the small pool's
    small = TORCH_16417.replace("22.00 MiB.", "2.00 MiB.")
    d = diagnose_message(small)
    assert d.kind == "fragmentation" and "max_split_size_mb" not in names(d)
    assert any("small pool" in line for line in d.details["left_out"])
    # a 20 MiB allocation is a whole large segment for a request under 10 MiB: below the floor
    d = diagnose_message(TORCH_16417.replace("22.00 MiB.", "20.00 MiB."))
    assert "max_split_size_mb" not in names(d)
    assert any("at least 20 MiB" in line for line in d.details["left_out"])
    # 22 MiB is above the 20 MiB floor: offered, with a value no larger than the request
    d = diagnose_message(TORCH_16417)
    fix = next(f for f in d.fixes if f.name == "max_split_size_mb")
    mb = int(fix.alloc_conf.split(":")[1])
    assert 20 <= mb <= 22


# https://github.com/OPIXray-author/OPIXray/issues/5: 2.00 GiB card, 1.02 GiB reserved, 145.93 MiB
# free, so 857 MiB outside PyTorch and a 264 MiB request
OPIXRAY = ("CUDA out of memory. Tried to allocate 264.00 MiB (GPU 0; 2.00 GiB total capacity; "
           "788.51 MiB already allocated; 145.93 MiB free; 1.02 GiB reserved in total by PyTorch)")


def test_the_context_allowance_is_relative_to_the_card():
    d = diagnose_message(OPIXRAY)
    outside = d.non_pytorch_bytes
    assert abs(outside - (2 * GiB - int(145.93 * MiB) - int(1.02 * GiB))) < 12 * MiB
    # 857 MiB held outside on a 2 GiB card: more than a context there, and it covers the
    # 118 MiB shortfall
    assert d.kind == "outside_pytorch", d.summary
    assert context_max(2 * GiB) == GiB // 2
    # on an 8 GiB card the same 857 MiB outside (reserved grown by the 6 GiB more) is what a
    # context and a desktop take
    big = ("CUDA out of memory. Tried to allocate 264.00 MiB (GPU 0; 8.00 GiB total capacity; "
           "6.80 GiB already allocated; 145.93 MiB free; 7.02 GiB reserved in total by PyTorch)")
    d = diagnose_message(big)
    assert abs(d.non_pytorch_bytes - outside) < 12 * MiB
    assert d.kind == "exhaustion", d.summary
    # the measured part of this process counts toward the allowance (2.1+ "this process" line)
    assert context_max(24 * GiB, own=3 * GiB) == 3 * GiB + (200 << 20)
    assert context_max(24 * GiB, own=100 * MiB) == context_max(24 * GiB)


def test_outside_pytorch_has_one_meaning_in_every_report():
    # https://github.com/pytorch/pytorch/issues/16417: "this process has P" printed
    d = diagnose_message(TORCH_16417)
    m = parse_message(TORCH_16417)
    reserved = m.allocated.bytes + m.unallocated.bytes
    assert d.non_pytorch_bytes == m.total.bytes - m.free.bytes - reserved
    assert d.details["outside_allocator_bytes"] == d.non_pytorch_bytes
    assert d.details["this_process_outside_allocator_bytes"] == m.this_process.bytes - reserved
    text = str(d)
    assert "outside PyTorch " in text.split("figures:", 1)[1].splitlines()[0]
    assert "outside this process's allocator" not in text


# real pastes of other frameworks, with the figures they print
FOREIGN = [
    # https://github.com/vllm-project/vllm/issues/34076
    ("(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's max "
     "seq len (262144), (24.0 GiB KV cache is needed, which is larger than the available KV cache "
     "memory (3.18 GiB). Based on the available memory, the estimated maximum model length is "
     "34736. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
     "initializing the engine.",
     "vllm", {"max_model_len": 262144, "estimated_max_model_len": 34736}, "20.82 GiB short"),
    # a wrapped log line: https://github.com/SergiioB/intel-arc-pro-b70-inference-cookbook/issues/4
    ("(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len "
     "(100000), (4.26 GiB KV cach\ne is needed, which is larger than the available KV cache memory "
     "(4.25 GiB). Based on the avai",
     "vllm", {"max_model_len": 100000}, "0.01 GiB short"),
    # https://github.com/vllm-project/vllm/issues/25837
    ("ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 3.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
     "other processes.",
     "vllm", {"gpu_memory_utilization": 0.9}, "gpu_memory_utilization=0.80 or less"),
    # https://github.com/google-deepmind/alphafold/issues/1023
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
     "allocate 7406166528 bytes.", "jax", {"requested_bytes": 7406166528}, "6.90 GiB"),
    # https://github.com/Azure/MachineLearningNotebooks/issues/880
    ("ResourceExhaustedError: 2 root error(s) found.\n  (0) Resource exhausted: OOM when allocating "
     "tensor with shape[16,112,112,147] and type float on /job:localhost/replica:0/task:0/device:"
     "GPU:0 by allocator GPU_0_bfc", "tensorflow",
     {"shape": [16, 112, 112, 147], "requested_bytes": 16 * 112 * 112 * 147 * 4}, "112.55 MiB"),
    # https://github.com/ollama/ollama/issues/6860
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc "
     "failed: out of memory\nggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size "
     "150995968\nllama_new_context_with_model: failed to allocate compute buffers",
     "llamacpp", {"requested_bytes": 144 * MiB, "device": 4}, "144.00 MiB buffer on device 4"),
]


@pytest.mark.parametrize("text,framework,figures,said", FOREIGN, ids=[f[1] + str(i) for i, f in
                                                                     enumerate(FOREIGN)])
def test_other_frameworks_figures_are_read_and_said(text, framework, figures, said):
    d = diagnose_message(text)
    assert d.kind == "not_pytorch_allocator" and d.details["framework"] == framework
    for k, v in figures.items():
        assert d.details["figures"][k] == v, k
    assert said in d.summary
    json.loads(d.json())


def test_a_negative_kv_budget_is_said_in_words():
    # vLLM prints a negative figure when the weights already pass its budget (the form of
    # gpu_worker.py's "Available KV cache memory: -0.53 GiB" line)
    text = ("(EngineCore_0 pid=1321) INFO 09-06 03:10:08 [gpu_worker.py:276] Available KV cache "
            "memory: -1.05 GiB\n(EngineCore_0 pid=1321) ERROR 09-06 03:10:08 [core.py:700] "
            "EngineCore failed to start.\nValueError: No available memory for the cache blocks.")
    d = diagnose_message(text)
    assert d.details["figures"]["kv_available_bytes"] == -round(1.05 * GiB)
    assert "1.05 GiB below zero" in d.summary
    assert not re.search(r"-\s?\d[\d.]*\s?GiB", d.summary)


# https://github.com/Tongyi-MAI/Z-Image/issues/103 (ROCm, exhaustion on the edge of fragmentation)
ZIMAGE = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.88 GiB. GPU 0 has a total "
          "capacity of 23.98 GiB of which 1.70 GiB is free. Of the allocated memory 21.65 GiB is "
          "allocated by PyTorch, and 279.78 MiB is reserved by PyTorch but unallocated.")


def test_fixes_are_ranked_by_what_the_platform_supports():
    d = diagnose_message(ZIMAGE)
    order = names(d)
    assert "expandable_segments" in order
    # ROCm may not have expandable segments: the fixes that surely apply come first
    assert order.index("reduce_peak_memory") < order.index("expandable_segments")
    assert order[-1] == "not_empty_cache"
    # the same figures on CUDA: expandable segments first
    cuda = diagnose_message(ZIMAGE.replace("HIP out", "CUDA out"))
    assert names(cuda)[0] == "expandable_segments"


# https://github.com/Comfy-Org/ComfyUI/issues/7440
MPS = ("MPS backend out of memory (MPS allocated: 9.57 GiB, other allocations: 17.35 GiB, max "
       "allowed: 27.20 GiB). Tried to allocate 292.50 MiB on private pool. Use "
       "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
       "cause system failure).")


def test_an_mps_report_says_what_each_figure_is():
    d = diagnose_message(MPS)
    line = str(d).split("figures:", 1)[1].splitlines()[0]
    for part in ("requested 292.50 MiB", "MPS allocated 9.57 GiB", "other allocations 17.35 GiB",
                 "max allowed 27.20 GiB"):
        assert part in line
    ev = " ".join(d.evidence)
    assert "current_allocated_memory" in ev and "driver_allocated_memory" in ev
    assert "private pool" in ev and "HIGH_WATERMARK_RATIO" in ev
    # the sum the limit test takes, computed: 9.57 + 17.35 GiB + 292.50 MiB
    total = round(9.57 * GiB) + round(17.35 * GiB) + round(292.5 * MiB)
    assert f"= {format_size(total)}" in ev
