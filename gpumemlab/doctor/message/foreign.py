"""Out-of-memory texts that are not PyTorch's caching allocator: what each one is and the settings
that decide it.

People paste every GPU memory error into an OOM tool. Those below come from other frameworks
(JAX/XLA's ``RESOURCE_EXHAUSTED: Out of memory while trying to allocate``, TensorFlow's ``OOM when
allocating tensor``, candle's ``DriverError(CUDA_ERROR_OUT_OF_MEMORY``, numba's ``cuMemAlloc``),
from serving engines' own budget checks that run before any allocation fails (vLLM's "No available
memory for the cache blocks" and "max seq len ... larger than the maximum number of tokens that can
be stored in KV cache", SGLang's "Not enough memory. Please try to increase --mem-fraction-static",
TGI's "Not enough memory to handle N prefill tokens"), from CUDA itself (a context that cannot be
created: ``cudaGetDeviceCount() ... Error 2: out of memory``, ``cuInit``), from pinned host memory
(``could not allocate pinned host memory``) and from NCCL's own buffers (``NCCL WARN Cuda failure
'out of memory'``), and llama.cpp's whole-buffer allocations (``cudaMalloc failed: out of
memory`` / ``failed to allocate CUDA0 buffer of size N``). None of them is read by the PyTorch allocator's settings, so the doctor names
the thing and its knobs instead of refusing the text.

Each rule is a pattern on the paste with all whitespace removed (wraps inside words do not
matter), starting with a literal so a search is linear in the paste; the first rule that matches
wins, in the order below (host-memory and NCCL before the frameworks whose logs carry them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Foreign", "identify", "RULES"]


@dataclass(frozen=True)
class Foreign:
    """One kind of non-PyTorch-allocator OOM: ``framework`` (a short key for the JSON), ``what``
    it is in words, ``settings`` (the knobs that decide it, one string each) and ``matched``, the
    squashed text that gave it away."""

    framework: str
    what: str
    settings: tuple
    matched: str = ""


_XLA = ("XLA_PYTHON_CLIENT_MEM_FRACTION (the share of the card JAX preallocates, 0.75 by default)",
        "XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand, so other processes keep room)",
        "XLA_PYTHON_CLIENT_ALLOCATOR=platform (no pool: frees at once, slower)",
        "the program's own buffers (BufferAssignment stats: smaller batch, jax.checkpoint/remat)")
# EXLA's own client options (hexdocs.pm/exla, "Clients"): not JAX's XLA_PYTHON_CLIENT_* variables
_EXLA = ("the client's :memory_fraction (how much of the GPU the client takes, 0.9 by default) "
         "and :preallocate (true by default), e.g. config :exla, :clients, cuda: [platform: "
         ":cuda, memory_fraction: 0.8, preallocate: false]",
         "the program's own buffers (BufferAssignment stats: a smaller batch, fewer live "
         "tensors; Nx.backend_transfer to the host for what is not needed on the GPU)",
         "other OS processes or BEAM clients on the same GPU (nvidia-smi)")
_TF = ("tf.config.experimental.set_memory_growth(gpu, True) or TF_FORCE_GPU_ALLOW_GROWTH=true "
       "(TensorFlow otherwise maps nearly the whole card at start)",
       "a memory limit per GPU (tf.config.set_logical_device_configuration(..., memory_limit=...); "
       "TF1: per_process_gpu_memory_fraction)",
       "the tensor's shape in the message (smaller batch or image size)")

RULES = (  # (framework, what, pattern on the squashed text, settings)
    ("host_pinned", "pinned (page-locked) host memory could not be allocated: the GPU is not the "
     "one out of memory, the host's locked-memory budget is",
     re.compile(r"couldnotallocatepinnedhostmemory|failedtoalloc\d+bytesonhost|"
                r"CachingHostAllocator[^\n]{0,200}?outofmemory", re.I),
     ("the host's free RAM and the locked-memory limit (ulimit -l; a container's or WSL2's "
      "memory limit in .wslconfig)", "pin_memory=False in DataLoader, or smaller pinned buffers",
      "fewer DataLoader workers and smaller prefetch")),
    ("nccl", "NCCL could not allocate its own communication buffers on the GPU (they are outside "
     "PyTorch's caching allocator, so its settings do not reach them)",
     re.compile(r"NCCLWARNCudafailure'?outofmemory|NCCLWARNFailedto(?:CUDA)?[cm]alloc|"
                r"ncclUnhandledCudaError[^\n]{0,300}?outofmemory", re.I),
     ("headroom for NCCL: cap PyTorch below the card (torch.cuda.set_per_process_memory_fraction) "
      "or free its cache before the first collective", "NCCL_BUFFSIZE (4 MiB per channel and peer "
      "by default) and NCCL_MAX_NCHANNELS", "NCCL_NVLS_ENABLE=0 (NVLink SHARP buffers)")),
    ("cuda_init", "CUDA could not create its context on the GPU (initialisation, before PyTorch's "
     "allocator holds anything): another process holds the card, or the device is partitioned",
     re.compile(r"cudaGetDeviceCount\(\)[^\n]{0,300}?Error2:outofmemory|"
                r"cuInitresultsinCUDA_ERROR_OUT_OF_MEMORY|cuInit[^\n]{0,80}?outofmemory", re.I),
     ("what else runs on the card (nvidia-smi; a crashed process holding it)",
      "CUDA_VISIBLE_DEVICES (a free GPU; a MIG slice too small for a context)",
      "on WSL2 or in a container: its memory limit and the host driver")),
    ("vllm", "vLLM's own memory budget check at start-up (the engine profiles the model, then "
     "gives what is left of gpu_memory_utilization x the card to the KV cache): no allocation "
     "failed",
     re.compile(r"Noavailablememoryforthecacheblocks|maxseqlen\(\d+\)islargerthanthemaximum"
                r"numberoftokensthatcanbestoredinKVcache|KVcacheisneeded,whichislargerthanthe"
                r"availableKVcachememory|insufficientmemoryfortheKVcache|found0GPUblocks|"
                r"Freememoryondevice[^\n]{0,40}?onstartupislessthandesiredGPUmemoryutilization|"
                r"AvailableKVcachememory:-\d", re.I),
     ("gpu_memory_utilization (the fraction of the whole card the engine may use; memory other "
      "processes hold counts against it)", "max_model_len (the KV cache must hold one request "
      "of this length)", "tensor_parallel_size, kv_cache_dtype=fp8, enforce_eager=True (no CUDA "
      "graph memory)", "other processes on the GPU (nvidia-smi)")),
    ("sglang", "SGLang's own memory budget check at start-up (the KV cache pool gets "
     "mem_fraction_static x the card minus the weights): no allocation failed",
     re.compile(r"Notenoughmemory\.?Pleasetrytoincrease--mem-fraction-static", re.I),
     ("--mem-fraction-static (raise it when the pool has no room after the weights; lower it when "
      "activations run out at run time)", "--context-length, --max-running-requests, "
      "--chunked-prefill-size", "tensor parallelism (--tp) or a quantized model")),
    ("tgi", "text-generation-inference's warm-up check: the batch it was told to serve does not "
     "fit",
     re.compile(r"Notenoughmemorytohandle\d+(?:totaltokens|prefilltokens)", re.I),
     ("--max-batch-prefill-tokens and --max-batch-total-tokens",
      "--max-input-length / --max-total-tokens", "--cuda-memory-fraction, --quantize, --num-shard")),
    ("llamacpp", "llama.cpp (ggml) asked the driver for a buffer and it had no room: its "
     "buffers are allocated whole (model weights per device, the KV cache, the compute buffer), "
     "with no caching allocator between them",
     # old builds (2023) checked every CUDA call with "CUDA error 2 at ggml-cuda.cu:N: out of
     # memory" (2 is cudaErrorMemoryAllocation) and then printed "current device: N"
     re.compile(r"cudaMallocfailed:outofmemory|failedtoallocate(?:CUDA|ROCm)\d+bufferofsize|"
                r"unabletoallocate(?:CUDA\d+|backend)buffer|"
                r"CUDAerror2at.{0,200}?ggml[\w-]{0,20}\.cu:\d+:outofmemory", re.I),
     ("-ngl / --n-gpu-layers (fewer layers on the GPU) and --tensor-split across GPUs",
      "-c / --ctx-size (the KV cache grows with it), --cache-type-k/v q8_0, -ub / --ubatch-size "
      "(the compute buffer)", "a smaller quantization of the model")),
    ("jax", "JAX/XLA's allocator ran out (its own pool, not PyTorch's)",
     re.compile(r"RESOURCE_EXHAUSTED:[^\n]{0,40}?Outofmemory|Resourceexhausted:Outofmemorywhile"
                r"tryingtoallocate|XlaRuntimeError[^\n]{0,60}?(?:Outofmemory|RESOURCE_EXHAUSTED)",
                re.I),
     _XLA),
    ("tensorflow", "TensorFlow's allocator ran out (its own BFC pool, not PyTorch's)",
     re.compile(r"OOMwhenallocatingtensor|ResourceExhaustedError|Allocator\(GPU_\d+_bfc\)ranout"
                r"ofmemory|failedtoallocate[\d.]+[KMGT]?(?:\(\d+bytes\))?fromdevice:(?:CUDA_ERROR_OUT"
                r"_OF_MEMORY|hipError_t\(1002\)|HIP_ERROR_OutOfMemory)", re.I), _TF),
    # 1002 is hipErrorOutOfMemory; TF's rocm_driver.cc names the driver's HIP_ERROR_OutOfMemory
    ("candle", "candle (Rust) asked the CUDA driver directly and it had no room: there is no "
     "caching allocator between them",
     re.compile(r"DriverError\(CUDA_ERROR_OUT_OF_MEMORY"),
     ("the model's size on the card: f16/bf16 or a quantized model, fewer layers on the GPU",
      "shorter context / smaller batch", "CUDA_VISIBLE_DEVICES and the device each tensor is "
      "placed on (candle does not spread a model over GPUs by itself)")),
    ("numba", "numba's CUDA driver call (cuMemAlloc) had no room: numba's own memory, not "
     "PyTorch's",
     re.compile(r"CalltocuMemAlloc(?:Async)?resultsinCUDA_ERROR_OUT_OF_MEMORY"),
     ("device arrays still referenced (del them; numba frees on garbage collection)",
      "NUMBA_CUDA_MEMORY_MANAGER (e.g. RMM's pool), or managed memory (cuda.managed_array)")),
    ("cuda_driver", "a CUDA driver allocation outside PyTorch's allocator failed",
     re.compile(r"CUDA_ERROR_OUT_OF_MEMORY"),
     ("whatever library made the call (its own pool or limit)",
      "memory PyTorch caches meanwhile (torch.cuda.empty_cache() before handing the card over)")),
)


# words (lower case) at least one of which every match of a rule holds: a rule's pattern runs
# only on a paste that holds one (str's substring search is far faster than a case-insensitive
# pattern's scan, so a 1 MB paste without them costs a few milliseconds per rule)
_KEYS = {
    "host_pinned": ("pinnedhostmemory", "byteson", "cachinghostallocator"),
    "nccl": ("nccl",),
    "cuda_init": ("cudagetdevicecount", "cuinit"),
    "vllm": ("cacheblocks", "kvcache", "gpublocks", "onstartupislessthan"),
    "sglang": ("--mem-fraction-static",),
    "tgi": ("notenoughmemorytohandle",),
    "llamacpp": ("cudamallocfailed", "bufferofsize", "unabletoallocate", "cudaerror2at"),
    "jax": ("resource_exhausted", "resourceexhausted", "xlaruntimeerror"),
    "tensorflow": ("oomwhenallocating", "resourceexhaustederror", "ranoutofmemory",
                   "fromdevice"),
    "candle": ("drivererror(cuda_error_out_of_memory",),
    "numba": ("cumemalloc",),
    "cuda_driver": ("cuda_error_out_of_memory",),
}


def identify(squashed: str) -> Foreign | None:
    """The first rule whose pattern occurs in ``squashed`` (a paste with whitespace removed), or
    None when the text shows none of them."""
    low = squashed.lower()
    for framework, what, pattern, settings in RULES:
        if not any(key in low for key in _KEYS[framework]):
            continue
        m = pattern.search(squashed)
        if m is None:
            continue
        if framework == "tensorflow" and m.group(0).startswith("Allocator") \
                and _XLA_WORDS.search(squashed):
            # XLA kept TensorFlow's BFC allocator and its log line: JAX's paths say xla/
            framework, what, settings = "jax", _JAX_BFC, _XLA
        if framework == "jax" and _EXLA_WORDS.search(squashed):
            # Elixir's Nx runs XLA through EXLA: same errors, its own client options
            framework, what, settings = "exla", _EXLA_WHAT, _EXLA
        return Foreign(framework, what, settings, m.group(0)[:120])
    return None


_XLA_WORDS = re.compile(r"xla/|jaxlib|/jax/", re.I)
# EXLA's module and Nx's, Elixir files and Elixir Logger's "[error] Execution of replica"
_EXLA_WORDS = re.compile(r"EXLA|\bNx\.|\.exs?:\d|elixir|\[error\]Executionofreplica")
_EXLA_WHAT = ("EXLA (Elixir Nx's XLA backend, not JAX) ran out of its XLA client's memory pool "
              "(not PyTorch's)")
_JAX_BFC = "JAX/XLA's allocator ran out (its own BFC pool, not PyTorch's)"
