"""The figures other frameworks' memory errors print, read and put into words: JAX/XLA's request in
bytes and BufferAssignment totals, TensorFlow's tensor shape and dtype (its size computed),
vLLM's KV-cache budget (tokens, GiB needed against GiB available, the free memory at start-up
against gpu_memory_utilization), llama.cpp's buffer size and device, TGI's token count, a pinned host buffer's size.

Each pattern runs on the paste with whitespace removed (log wraps split words and numbers), and
starts with a literal, so the scan is linear in the paste. :func:`read` returns the figures (name
to bytes or a count, and the text printed) and the sentences that say what they mean; a negative
figure (vLLM prints "-1.05 GiB" when the weights and activations already pass its budget) is said
in words, never printed with a minus sign.
"""
from __future__ import annotations

import math
import re

from gpumemlab.units import format_size

__all__ = ["read"]

_SCALE = {"": 1, "B": 1, "bytes": 1, "K": 1 << 10, "KiB": 1 << 10, "KB": 1 << 10, "M": 1 << 20,
          "MiB": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30, "GB": 1 << 30,
          "T": 1 << 40, "TiB": 1 << 40, "TB": 1 << 40}
_SZ = r"(-?\d+(?:\.\d+)?)\s?(TiB|GiB|MiB|KiB|TB|GB|MB|KB|B|bytes|[KMGT])?"
# bytes per element of TensorFlow's dtype names ("type float", "type half", ...)
_DTYPE = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
          "float64": 8, "int32": 4, "int64": 8, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
          "complex64": 8, "complex128": 16}


def _b(number, unit):
    return round(float(number) * _SCALE[unit or ""])


def _s(n):
    return format_size(n)


_JAX_REQUEST = re.compile(r"(?:tryingtoallocate|Outofmemoryallocating)(\d+)bytes", re.I)
_JAX_BFC = re.compile(r"ranoutofmemorytryingtoallocate" + _SZ.replace(r"\s?", "")
                      + r"(?:\(roundedto(\d+)\))?")
_JAX_ASYNC = re.compile(r"cuMemAlloc(?:Async)?failedtoallocate(\d+)bytes")
_JAX_TOTAL = re.compile(r"totalallocation:(\d+(?:\.\d+)?)(TiB|GiB|MiB|KiB|B)")
_JAX_CUDA = re.compile(r"Freememory/Totalmemory:(\d+)/(\d+)")
# the BFC allocator's Stats block (tsl/framework/bfc_allocator.cc, logged by TensorFlow and XLA
# when it runs out): Limit, InUse, MaxInUse, ..., LargestFreeBlock, all in bytes
_BFC_STATS = re.compile(r"Limit:(\d+)InUse:(\d+)(?:MaxInUse:(\d+))?.{0,200}?LargestFreeBlock:(\d+)")
_TF_SHAPE = re.compile(r"OOMwhenallocatingtensorwithshape\[([\d,]*)\](?:andtype(\w+?)on)?")
_TF_BYTES = re.compile(r"failedtoallocate[\d.]+[KMGT]?\((\d+)bytes\)")
_TF_SIZE = re.compile(r"failedtoallocate(\d+(?:\.\d+)?)([KMGT])fromdevice")
_VLLM_TOKENS = re.compile(r"maxseqlen\((\d+)\)islargerthanthemaximumnumberoftokensthatcanbe"
                          r"storedinKVcache\((\d+)\)")
_VLLM_GIB = re.compile(r"maxseqlen\((\d+)\),?\(?(\d+(?:\.\d+)?)GiBKVcacheisneeded,whichis"
                       r"largerthantheavailableKVcachememory\((-?\d+(?:\.\d+)?)GiB\)")
_VLLM_AVAILABLE = re.compile(r"AvailableKVcachememory[:(](-?\d+(?:\.\d+)?)GiB")
# the worker's profiling line: "total_gpu_memory (8.00GiB) x gpu_memory_utilization (0.70) =
# 5.60GiB" then "model weights take 5.20GiB; ...; PyTorch activation peak memory takes 1.42GiB;
# the rest of the memory reserved for KV Cache is -1.05GiB"
_VLLM_BUDGET = re.compile(r"x?gpu_memory_utilization\((\d+(?:\.\d+)?)\)=(\d+(?:\.\d+)?)GiB")
_VLLM_PARTS = re.compile(r"modelweightstake(\d+(?:\.\d+)?)GiB.{0,120}?activationpeakmemorytakes"
                         r"(\d+(?:\.\d+)?)GiB.{0,80}?reservedforKVCacheis(-?\d+(?:\.\d+)?)GiB")
_VLLM_ESTIMATE = re.compile(r"estimatedmaximummodellengthis(\d+)")
_VLLM_STARTUP = re.compile(r"Freememoryondevice(?:cuda:\d+)?\((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)"
                           r"GiB\)onstartupislessthandesiredGPUmemoryutilization\((\d+(?:\.\d+)?)"
                           r",(\d+(?:\.\d+)?)GiB\)", re.I)   # titles quote it in lower case
_LLAMA = re.compile(r"allocating(\d+(?:\.\d+)?)MiBondevice(\d+):cudaMallocfailed")
_LLAMA_DEVICE = re.compile(r"ggml[\w-]{0,20}\.cu:\d+:outofmemorycurrentdevice:(\d+)")
_LLAMA_SIZE = re.compile(r"failedtoallocate(CUDA|ROCm|Vulkan|Metal)(\d+)bufferofsize(\d+)")
_HOST = re.compile(r"(?:failedtoalloc(\d+)bytesonhost|pinnedhostmemoryofsize:(\d+))")
_TGI = re.compile(r"Notenoughmemorytohandle(\d+)(totaltokens|prefilltokens)")


def read(framework: str, squashed: str) -> tuple[dict, list]:
    """The figures ``squashed`` (a paste without whitespace) prints for ``framework`` and the
    sentences that say what they mean; ({}, []) when it prints none. The last occurrence of
    each figure is read (a log repeats its error)."""
    def last(pattern):
        found = None
        for found in pattern.finditer(squashed):
            pass
        return found

    fig, says = {}, []
    if framework in ("jax", "exla", "tensorflow"):
        m = last(_BFC_STATS)
        if m:
            limit, used, largest = int(m.group(1)), int(m.group(2)), int(m.group(4))
            fig.update(pool_limit_bytes=limit, pool_in_use_bytes=used,
                       largest_free_block_bytes=largest)
            if m.group(3):
                fig["pool_peak_bytes"] = int(m.group(3))
            says.append(f"the BFC pool's limit is {_s(limit)} and {_s(used)} of it was in use "
                        f"(Limit - InUse: {_s(max(limit - used, 0))}; the largest free block "
                        f"{_s(largest)})")
    if framework in ("jax", "exla"):
        m = last(_JAX_REQUEST)
        if m:
            fig["requested_bytes"] = int(m.group(1))
            says.append(f"XLA tried to allocate {_s(int(m.group(1)))} ({m.group(1)} bytes) in one "
                        f"buffer")
        m = last(_JAX_BFC)
        if m and "requested_bytes" not in fig:
            exact = m.group(3)
            fig["requested_bytes"] = int(exact) if exact else _b(m.group(1), m.group(2))
            says.append(f"XLA's BFC pool ran out trying to allocate {m.group(1)} "
                        f"{m.group(2) or 'bytes'}" + (f" (rounded to {exact} bytes)" if exact else ""))
        m = last(_JAX_ASYNC)
        if m and "requested_bytes" not in fig:
            fig["requested_bytes"] = int(m.group(1))
            says.append(f"XLA's cudaMallocAsync allocator asked CUDA for "
                        f"{_s(int(m.group(1)))} at once")
        m = last(_JAX_TOTAL)
        if m:
            fig["program_bytes"] = _b(m.group(1), m.group(2))
            says.append(f"the compiled program's buffers total {_s(fig['program_bytes'])} "
                        f"(BufferAssignment stats)")
        m = last(_JAX_CUDA)
        if m:
            fig["free_bytes"], fig["total_bytes"] = int(m.group(1)), int(m.group(2))
            says.append(f"CUDA reported {_s(int(m.group(1)))} free of {_s(int(m.group(2)))}")
        _pool_sentence(fig, says)
        if fig.get("requested_bytes") and fig.get("total_bytes") \
                and fig["requested_bytes"] > fig["total_bytes"]:
            says.append("the one buffer is larger than the whole card: a shape or a batch is "
                        "far bigger than intended")
    elif framework == "tensorflow":
        m = last(_TF_SHAPE)
        if m:
            dims = [int(x) for x in m.group(1).split(",") if x]
            n = math.prod(dims)
            fig["shape"] = dims
            size = _DTYPE.get((m.group(2) or "").lower())
            if size:
                fig["requested_bytes"] = n * size
                says.append(f"the tensor of shape {dims} ({n:,} elements of {m.group(2)}, "
                            f"{size} bytes each) needs {_s(n * size)}")
            else:
                says.append(f"the tensor of shape {dims} has {n:,} elements (the message names "
                            f"no dtype: {_s(n * 4)} as float32)")
        m = last(_TF_BYTES)
        if m and "requested_bytes" not in fig:
            fig["requested_bytes"] = int(m.group(1))
            says.append(f"the allocator asked the driver for {_s(int(m.group(1)))} at once")
        m = last(_TF_SIZE)
        if m and "requested_bytes" not in fig:      # "8.00G": TensorFlow's binary units
            fig["requested_bytes"] = _b(m.group(1), m.group(2))
            says.append(f"the allocator asked the driver for {m.group(1)} {m.group(2)}iB at once")
        _pool_sentence(fig, says)
    elif framework == "vllm":
        m = last(_VLLM_GIB)
        if m:
            need, avail = float(m.group(2)), float(m.group(3))
            fig.update(max_model_len=int(m.group(1)), kv_needed_bytes=_b(m.group(2), "GiB"),
                       kv_available_bytes=_b(m.group(3), "GiB"))
            says.append(_kv_sentence(int(m.group(1)), need, avail))
        m = last(_VLLM_TOKENS)
        if m:
            want, have = int(m.group(1)), int(m.group(2))
            fig.update(max_model_len=want, kv_tokens=have)
            says.append(f"max_model_len is {want:,} tokens and the KV cache holds {have:,}: "
                        f"{want - have:,} tokens ({(want - have) / want:.0%}) short; "
                        f"max_model_len={have} or less fits as it is")
        m = last(_VLLM_BUDGET)
        if m:
            fig.update(gpu_memory_utilization=float(m.group(1)),
                       budget_bytes=_b(m.group(2), "GiB"))
            says.append(f"the engine may use {m.group(2)} GiB (gpu_memory_utilization="
                        f"{m.group(1)} x the card)")
        m = last(_VLLM_PARTS)
        if m:
            fig.update(weights_bytes=_b(m.group(1), "GiB"),
                       activation_peak_bytes=_b(m.group(2), "GiB"),
                       kv_available_bytes=_b(m.group(3), "GiB"))
            says.append(f"the weights take {m.group(1)} GiB and the activation peak "
                        f"{m.group(2)} GiB")
            says.append(_available_sentence(float(m.group(3))))
        m = last(_VLLM_ESTIMATE)
        if m:
            fig["estimated_max_model_len"] = int(m.group(1))
            says.append(f"vLLM estimates max_model_len={m.group(1)} fits the memory it has")
        m = last(_VLLM_AVAILABLE)
        if m and "kv_available_bytes" not in fig:
            fig["kv_available_bytes"] = _b(m.group(1), "GiB")
            says.append(_available_sentence(float(m.group(1))))
        m = last(_VLLM_STARTUP)
        if m:
            free, total, util, want = (float(m.group(i)) for i in range(1, 5))
            fig.update(free_bytes=_b(m.group(1), "GiB"), total_bytes=_b(m.group(2), "GiB"),
                       gpu_memory_utilization=util, budget_bytes=_b(m.group(4), "GiB"))
            held = total - free
            says.append(f"at start-up {m.group(1)} GiB of the {m.group(2)} GiB card was free "
                        f"({held:.2f} GiB already held: other processes, an earlier engine, "
                        f"the desktop), less than the {m.group(4)} GiB that gpu_memory_utilization="
                        f"{m.group(3)} asks for: gpu_memory_utilization={_floor2(free / total)}"
                        f" or less passes this check (the KV cache then gets less), or free "
                        f"the card")
    elif framework == "llamacpp":
        m = last(_LLAMA)
        if m:
            fig["requested_bytes"] = _b(m.group(1), "MiB")
            fig["device"] = int(m.group(2))
            says.append(f"llama.cpp asked cudaMalloc for one {m.group(1)} MiB buffer on device "
                        f"{m.group(2)}")
        m = last(_LLAMA_SIZE)
        if m and "requested_bytes" not in fig:
            fig["requested_bytes"] = int(m.group(3))
            fig["device"] = int(m.group(2))
            says.append(f"llama.cpp could not allocate a {_s(int(m.group(3)))} {m.group(1)} "
                        f"buffer on device {m.group(2)}")
        m = last(_LLAMA_DEVICE)
        if m and "device" not in fig:     # old builds name the device, not the size
            fig["device"] = int(m.group(1))
            says.append(f"a CUDA call in ggml-cuda.cu failed with out of memory on device "
                        f"{m.group(1)} (old builds print no size)")
    elif framework == "host_pinned":
        m = last(_HOST)
        if m:
            n = int(m.group(1) or m.group(2))
            fig["requested_bytes"] = n
            says.append(f"{_s(n)} of pinned host memory was asked for at once")
    elif framework == "tgi":
        m = last(_TGI)
        if m:
            fig["tokens"] = int(m.group(1))
            says.append(f"the warm-up batch of {int(m.group(1)):,} "
                        f"{'prefill' if 'prefill' in m.group(2) else 'total'} tokens did not fit")
    return fig, says


def _pool_sentence(fig, says):
    """What the BFC Stats block says of this request: the pool full, or free but in pieces."""
    R, limit = fig.get("requested_bytes"), fig.get("pool_limit_bytes")
    if R is None or limit is None:
        return
    free, largest = max(limit - fig["pool_in_use_bytes"], 0), fig["largest_free_block_bytes"]
    if largest == 0 and free >= R:
        says.append(f"the pool has no free block at all: the {_s(free)} between Limit and InUse "
                    f"is not free chunks (regions not yet grown, or lost to chunk rounding), "
                    f"so the pool is full for this {_s(R)} request")
    elif free < R:
        says.append(f"the pool had {_s(free)} free, less than the {_s(R)} asked for: the pool "
                    f"is full (a larger pool or a smaller program)")
    elif largest < R:
        says.append(f"the pool had {_s(free)} free but no block of {_s(R)} (the largest "
                    f"{_s(largest)}): its free memory is fragmented")


def _floor2(x: float) -> str:
    return f"{math.floor(x * 100) / 100:.2f}"


def _available_sentence(avail: float) -> str:
    if avail <= 0:
        return (f"the memory left for the KV cache is {abs(avail):.2f} GiB below zero: the "
                f"weights, activations and CUDA graphs already use more than "
                f"gpu_memory_utilization x the card, so no max_model_len fits; raise "
                f"gpu_memory_utilization, quantize, or shard the model (tensor_parallel_size)")
    return f"vLLM had {avail:.2f} GiB for the KV cache"


def _kv_sentence(length: int, need: float, avail: float) -> str:
    if avail <= 0:
        return (f"one request of max_model_len={length:,} needs {need:.2f} GiB of KV cache; "
                + _available_sentence(avail))
    return (f"one request of max_model_len={length:,} needs {need:.2f} GiB of KV cache and "
            f"{avail:.2f} GiB is available: {need - avail:.2f} GiB short "
            f"({need / avail:.2f}x what fits)")
