"""KV-cache sizing: bytes per token from a model's shape, and how many tokens fit on a GPU.

Models the arithmetic of vLLM's paper (§3: OPT-13B keeps 2 x 5120 x 40 x 2 B = 800 KB per token)
and of vLLM's ``kv_cache_utils.get_num_blocks``: per layer and block,
``page_size = 2 x block_size x num_kv_heads x head_size x dtype_bytes``, and
``num_blocks = available_memory // page_size // num_layers``.
The presets are public model shapes; parameter counts are the nominal ones in the model names.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.units import parse_size

_DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "half": 2,
                "bfloat16": 2, "bf16": 2, "float8": 1, "fp8": 1, "int8": 1}


def dtype_bytes(dtype) -> int:
    """Bytes per element of ``dtype`` (a name like "float16", a torch dtype, or an int)."""
    if isinstance(dtype, bool):
        raise TypeError("dtype must be a dtype name, a torch dtype or a byte count, not bool")
    if isinstance(dtype, int):
        if dtype <= 0:
            raise ValueError(f"dtype byte count must be positive, got {dtype}")
        return dtype
    name = str(dtype).replace("torch.", "").lower()
    try:
        return _DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {sorted(_DTYPE_BYTES)}") from None


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype="float16") -> int:
    """Bytes of K and V one token keeps across all layers: 2 x layers x kv_heads x head_dim x bytes."""
    return (2 * _positive_int(num_layers, "num_layers") * _positive_int(num_kv_heads, "num_kv_heads")
            * _positive_int(head_dim, "head_dim") * dtype_bytes(dtype))


@dataclass(frozen=True)
class ModelShape:
    """The parts of a transformer's shape that decide its KV-cache and weight memory."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_params: int           # nominal parameter count, for the weight bytes
    max_seq_len: int
    dtype: str = "float16"

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.num_layers, self.num_kv_heads, self.head_dim, self.dtype)

    @property
    def weight_bytes(self) -> int:
        return self.num_params * dtype_bytes(self.dtype)

    @property
    def kv_bytes_per_max_request(self) -> int:
        """KV bytes of one request at the model's maximum length (1.6 GB for OPT-13B)."""
        return self.kv_bytes_per_token * self.max_seq_len


# Public shapes. OPT-13B's 40 heads x 128 = hidden 5120, 40 layers: the paper's 800 KB/token.
PRESETS = {
    "opt-13b": ModelShape("OPT-13B", 40, 40, 128, 13_000_000_000, 2048),
    "opt-66b": ModelShape("OPT-66B", 64, 72, 128, 66_000_000_000, 2048),
    "opt-175b": ModelShape("OPT-175B", 96, 96, 128, 175_000_000_000, 2048),
    "llama-2-7b": ModelShape("Llama-2-7B", 32, 32, 128, 7_000_000_000, 4096),
    "llama-2-13b": ModelShape("Llama-2-13B", 40, 40, 128, 13_000_000_000, 4096),
    "llama-3-8b": ModelShape("Llama-3-8B (GQA, 8 KV heads)", 32, 8, 128, 8_000_000_000, 8192),
    "mistral-7b": ModelShape("Mistral-7B (GQA, 8 KV heads)", 32, 8, 128, 7_000_000_000, 32768),
}


def model_shape(model) -> ModelShape:
    """A :class:`ModelShape`, given one or a preset name (case-insensitive)."""
    if isinstance(model, ModelShape):
        return model
    if not isinstance(model, str):
        raise TypeError(f"model must be a preset name or a ModelShape, not {type(model).__name__}")
    try:
        return PRESETS[model.lower()]
    except KeyError:
        raise ValueError(f"unknown model preset {model!r}: use one of {sorted(PRESETS)}") from None


@dataclass(frozen=True)
class KVBudget:
    """How a GPU's memory splits between weights, other use and the KV cache."""

    model: ModelShape
    gpu_memory_bytes: int
    usable_bytes: int          # gpu_memory x gpu_memory_utilization
    weight_bytes: int
    activation_bytes: int
    kv_memory_bytes: int       # what is left for the KV cache
    kv_bytes_per_token: int
    max_tokens: int            # token slots that fit in kv_memory_bytes
    block_size: int
    num_blocks: int            # whole blocks of block_size tokens

    @property
    def max_requests_at_max_len(self) -> int:
        """Requests that fit if each reserves the model's maximum length (Orca-Max, FasterTransformer)."""
        return self.max_tokens // self.model.max_seq_len


def kv_budget(model, gpu_memory, *, gpu_memory_utilization: float = 1.0, activation_memory=0,
              kv_memory=None, block_size: int = 16) -> KVBudget:
    """Split ``gpu_memory`` into weights, activations and KV cache; count the token slots.

    Args:
        model: a preset name (see ``PRESETS``) or a :class:`ModelShape`.
        gpu_memory: total GPU memory, bytes or a string like "40GiB".
        gpu_memory_utilization: share of the GPU the server may use (vLLM's flag; 0.9 in its docs).
        activation_memory: bytes kept for activations and other buffers.
        kv_memory: give the KV memory directly (as in the paper's Table 1) instead of deriving it.
        block_size: tokens per KV block, to count whole blocks.

    Raises:
        ValueError: if the weights and activations do not fit in the usable memory.
    """
    shape = model_shape(model)
    total = parse_size(gpu_memory, name="gpu_memory")
    if isinstance(gpu_memory_utilization, bool) or not isinstance(gpu_memory_utilization, (int, float)):
        raise TypeError("gpu_memory_utilization must be a number between 0 and 1")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    _positive_int(block_size, "block_size")
    usable = int(total * gpu_memory_utilization)
    activations = parse_size(activation_memory, name="activation_memory")
    if kv_memory is None:
        kv = usable - shape.weight_bytes - activations
        if kv <= 0:
            raise ValueError(f"{shape.name}'s weights ({shape.weight_bytes} bytes) and activations "
                             f"({activations} bytes) do not fit in {usable} usable bytes")
    else:
        kv = parse_size(kv_memory, name="kv_memory")
    per_token = shape.kv_bytes_per_token
    max_tokens = kv // per_token
    return KVBudget(shape, total, usable, shape.weight_bytes, activations, kv, per_token,
                    max_tokens, block_size, max_tokens // block_size)
