"""``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF``: the allocator's settings and their parser.

Follows the newest c10/core/AllocatorConfig.{h,cpp} (``AcceleratorAllocatorConfig::parseArgs``
and ``ConfigTokenizer``) and c10/cuda/CUDAAllocatorConfig.cpp (see docs/research/
NEWEST_PYTORCH_FACTS.md): the string is lexed on ``, : [ ]``, all whitespace is dropped, the
separator after a key is skipped without being checked (so ``expandable_segments,True`` is
accepted, as in PyTorch), numbers take their numeric prefix (``stoull``), booleans are exactly
``True`` or ``False``, and an unknown key is an error. Every parse first resets
max_split_size, roundup_power2_divisions and garbage_collection_threshold to their defaults and
max_non_split_rounding to the large segment size; other settings keep their previous values.

Errors raise :class:`AllocatorConfigError`, which is both a ``ValueError`` (PyTorch's
TORCH_CHECK_VALUE) and a ``RuntimeError`` (its internal asserts and ``stoull`` failures), with
PyTorch's message. Unlike PyTorch, a failed parse changes nothing at all (PyTorch keeps the keys
applied before the bad one): bad input loses nothing.
"""
from __future__ import annotations

import copy
import math
import re

from .constants import (K_LARGE_BUFFER, K_MB, K_MIN_LARGE_ALLOC, K_ROUNDUP_POWER2_INTERVALS,
                        SIZE_MAX)
from .rounding import roundup_power2_bucket

# The first of these that is set wins, as in c10 (the legacy CUDA name first).
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

_MAX_REGISTER_THREADS = 128  # c10: pinned_max_register_threads()


class AllocatorConfigError(ValueError, RuntimeError):
    """A bad allocator settings string (PyTorch raises ValueError or RuntimeError)."""


def _is_power_of_2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def lex_args(env: str) -> list[str]:
    """Split a settings string into tokens like ``ConfigTokenizer``: separators are tokens,
    whitespace is dropped."""
    tokens: list[str] = []
    buf: list[str] = []
    for ch in env:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf = []
            tokens.append(ch)
        elif not ch.isspace():
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


class AllocatorConfig:
    """The settings the caching allocator reads (c10 ``AcceleratorAllocatorConfig`` and
    ``CUDAAllocatorConfig``)."""

    def __init__(self):
        self.max_split_size = SIZE_MAX
        self.large_segment_size = K_LARGE_BUFFER
        self.max_non_split_rounding_size = K_LARGE_BUFFER
        self.garbage_collection_threshold = 0.0
        self.roundup_power2_divisions_ = [0] * K_ROUNDUP_POWER2_INTERVALS
        self.expandable_segments = False
        self.release_lock_on_cudamalloc = False
        self.pinned_use_cuda_host_register = False
        self.pinned_num_register_threads = 1
        self.pinned_use_background_threads = False
        self.pinned_reserve_segment_size_mb = 0
        self.pinned_free_catch_all = False
        # AcceleratorAllocatorConfig's host keys (torch 2.13): above these, no power-of-2
        # rounding / no caching of pinned blocks. Bytes; SIZE_MAX (the default) means no limit.
        self.pinned_max_round_threshold = SIZE_MAX
        self.pinned_max_cached_size = SIZE_MAX
        self.graph_capture_record_stream_reuse = False
        self.throw_on_cudamalloc_oom = False
        self.per_process_memory_fraction = 1.0
        self.backend = "native"
        self.last_allocator_settings = ""
        self.any_roundup = False  # any bucket with divisions > 1 (else round_size is plain 512s)

    @classmethod
    def parse(cls, env: str | None = "") -> "AllocatorConfig":
        """A fresh config with ``env`` applied."""
        config = cls()
        if env:
            config.apply(env)
        return config

    def copy(self) -> "AllocatorConfig":
        return copy.deepcopy(self)

    def roundup_power2_divisions(self, size: int) -> int:
        """Divisions for ``size``'s interval (``rounding.roundup_power2_bucket``)."""
        return self.roundup_power2_divisions_[roundup_power2_bucket(size)]

    def apply(self, env: str) -> None:
        """Parse ``env`` onto this config (``parseArgs``). All or nothing."""
        if not isinstance(env, str):
            raise TypeError(f"allocator settings must be a string like 'expandable_segments:True', "
                            f"not {type(env).__name__}")
        trial = self.copy()
        trial._parse_args(env)
        self.__dict__.update(trial.__dict__)

    def _parse_args(self, env: str) -> None:
        self.max_split_size = SIZE_MAX
        self.roundup_power2_divisions_ = [0] * K_ROUNDUP_POWER2_INTERVALS
        self.garbage_collection_threshold = 0.0
        self.last_allocator_settings = env
        tokens = _Tokens(lex_args(env))
        # Pass 1: the large segment size, which bounds the other sizes.
        i = 0
        while i < len(tokens):
            if tokens[i] == "large_segment_size_mb":
                value = tokens.to_size_t(i + 2)
                if value <= K_MIN_LARGE_ALLOC // K_MB:
                    raise AllocatorConfigError(
                        "CachingAllocator option large_segment_size_mb must be > 10 MB")
                self.large_segment_size = value * K_MB
            i += 1
        self.max_non_split_rounding_size = self.large_segment_size
        # Pass 2: everything else.
        i = 0
        while i < len(tokens):
            key = tokens[i]
            handler = _HANDLERS.get(key)
            if handler is None:
                raise AllocatorConfigError(f"Unrecognized key '{key}' in Accelerator allocator config.")
            # The separator after the key is skipped unchecked, as in c10.
            i = handler(self, tokens, i + 2, key)
            if i + 1 < len(tokens):
                i += 1  # the ',' (also unchecked in c10)
            i += 1
        self.any_roundup = any(d > 1 for d in self.roundup_power2_divisions_)

    def settings_dict(self) -> dict:
        """The ``allocator_settings`` entry of ``torch.cuda.memory._snapshot()``."""
        return {
            "PYTORCH_CUDA_ALLOC_CONF": self.last_allocator_settings,
            "max_split_size": -1 if self.max_split_size == SIZE_MAX else self.max_split_size,
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "expandable_segments": self.expandable_segments,
            "pinned_num_register_threads": self.pinned_num_register_threads,
            "release_lock_on_cudamalloc": self.release_lock_on_cudamalloc,
            "pinned_use_cuda_host_register": self.pinned_use_cuda_host_register,
            "graph_capture_record_stream_reuse": self.graph_capture_record_stream_reuse,
            "roundup_power2_divisions": {
                str(1 << i): self.roundup_power2_divisions_[i]
                for i in range(K_ROUNDUP_POWER2_INTERVALS)
            },
        }


class _Tokens(list):
    """``ConfigTokenizer``'s accessors over the token list."""

    def at(self, i) -> str:
        if i >= len(self):
            raise AllocatorConfigError("Index out of bounds in ConfigTokenizer")
        return self[i]

    def to_size_t(self, i) -> int:
        text = self.at(i)
        match = re.match(r"\s*([+-]?)(\d+)", text)
        if not match:
            raise AllocatorConfigError(f"stoull: no conversion of '{text}' to a number")
        value = int(match.group(2))
        if match.group(1) == "-":
            value = (-value) % (SIZE_MAX + 1)  # std::stoull wraps negatives around
        if value > SIZE_MAX:
            raise AllocatorConfigError(f"stoull: '{text}' is out of range")
        return value

    def to_double(self, i) -> float:
        text = self.at(i)
        match = re.match(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)",
                         text, re.IGNORECASE)
        if not match:
            raise AllocatorConfigError(f"stod: no conversion of '{text}' to a number")
        return float(match.group(0))

    def to_bool(self, i) -> bool:
        text = self.at(i)
        if text not in ("True", "False"):
            raise AllocatorConfigError(
                f"Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{text}'")
        return text == "True"


def _parse_mb_at_least_large_segment(attr):
    def handler(config, tokens, i, key):
        value = tokens.to_size_t(i)
        min_mb = config.large_segment_size // K_MB
        if value < min_mb:
            raise AllocatorConfigError(f"CachingAllocator option {key} too small, must be >= {min_mb}")
        value = min(value, SIZE_MAX // K_MB)
        setattr(config, attr, value * K_MB)
        return i
    return handler


def _skip_large_segment_size(config, tokens, i, key):
    tokens.at(i)  # parsed in pass 1
    return i


def _parse_gc_threshold(config, tokens, i, key):
    value = tokens.to_double(i)
    if not (0.0 < value < 1.0):
        raise AllocatorConfigError("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
    config.garbage_collection_threshold = value
    return i


def _parse_roundup_power2_divisions(config, tokens, i, key):
    divisions = [0] * K_ROUNDUP_POWER2_INTERVALS
    if tokens.at(i) == "[":
        first_value = True
        last_index = 0
        i += 1
        while tokens.at(i) != "]":
            interval = tokens[i]
            value = tokens.to_size_t(i + 2)  # skips the ':'
            i += 2
            if value != 0 and not _is_power_of_2(value):
                raise AllocatorConfigError(
                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
            if interval == ">":
                for j in range(last_index + 1, len(divisions)):
                    divisions[j] = value
            else:
                interval_mb = tokens.to_size_t(i - 2)
                if not _is_power_of_2(interval_mb):
                    raise AllocatorConfigError("For roundups, the intervals have to be power of 2 ")
                index = min(max(interval_mb.bit_length() - 1, 0), len(divisions) - 1)
                if first_value:
                    for j in range(index):
                        divisions[j] = value
                    first_value = False
                divisions[index] = value
                last_index = index
            if tokens.at(i + 1) != "]":
                i += 1  # the ','
            i += 1
    else:
        value = tokens.to_size_t(i)
        if not _is_power_of_2(value):
            raise AllocatorConfigError("For roundups, the divisions has to be power of 2 ")
        divisions = [value] * K_ROUNDUP_POWER2_INTERVALS
    config.roundup_power2_divisions_ = divisions
    return i


def _parse_bool(attr):
    def handler(config, tokens, i, key):
        setattr(config, attr, tokens.to_bool(i))
        return i
    return handler


def _parse_backend(config, tokens, i, key):
    value = tokens.at(i)
    if value not in ("native", "cudaMallocAsync"):
        raise AllocatorConfigError("Unknown allocator backend, options are native and cudaMallocAsync")
    if value != "native":
        raise AllocatorConfigError(
            "backend:cudaMallocAsync is not modelled by gpumemlab's simulated GPU, which models "
            "the native caching allocator only")
    config.backend = value
    return i


def _parse_register_threads(config, tokens, i, key):
    value = tokens.to_size_t(i)
    if not _is_power_of_2(value):
        raise AllocatorConfigError(f"Number of register threads has to be power of 2, got {value}")
    if value > _MAX_REGISTER_THREADS:
        raise AllocatorConfigError("Number of register threads should be less than or equal to "
                                   f"{_MAX_REGISTER_THREADS}, got {value}")
    config.pinned_num_register_threads = value
    return i


def _parse_reserve_segment(config, tokens, i, key):
    value = tokens.to_size_t(i)
    if value <= 0:
        raise AllocatorConfigError("Pinned reserve segment size has to be greater than 0")
    config.pinned_reserve_segment_size_mb = value
    return i


def _parse_pinned_mb(attr):
    # torch 2.13 libc10 parsePinnedMaxRoundThreshold / parsePinnedMaxCachedSize: the value is
    # clamped to SIZE_MAX / kMB and shifted by 20 bits (MiB); no lower bound, so 0 is allowed.
    def handler(config, tokens, i, key):
        value = min(tokens.to_size_t(i), SIZE_MAX // K_MB)
        setattr(config, attr, value * K_MB)
        return i
    return handler


def _parse_fraction(config, tokens, i, key):
    value = tokens.to_double(i)
    if math.isnan(value) or not (0.0 <= value <= 1.0):
        raise AllocatorConfigError("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
    config.per_process_memory_fraction = value
    return i


_HANDLERS = {
    "large_segment_size_mb": _skip_large_segment_size,
    "max_split_size_mb": _parse_mb_at_least_large_segment("max_split_size"),
    "max_non_split_rounding_mb": _parse_mb_at_least_large_segment("max_non_split_rounding_size"),
    "garbage_collection_threshold": _parse_gc_threshold,
    "roundup_power2_divisions": _parse_roundup_power2_divisions,
    "expandable_segments": _parse_bool("expandable_segments"),
    "pinned_use_background_threads": _parse_bool("pinned_use_background_threads"),
    "release_lock_on_cudamalloc": _parse_bool("release_lock_on_cudamalloc"),
    "release_lock_on_hipmalloc": _parse_bool("release_lock_on_cudamalloc"),
    "pinned_use_cuda_host_register": _parse_bool("pinned_use_cuda_host_register"),
    "pinned_use_hip_host_register": _parse_bool("pinned_use_cuda_host_register"),
    "pinned_num_register_threads": _parse_register_threads,
    "pinned_reserve_segment_size_mb": _parse_reserve_segment,
    "pinned_free_catch_all": _parse_bool("pinned_free_catch_all"),
    "pinned_max_round_threshold_mb": _parse_pinned_mb("pinned_max_round_threshold"),
    "pinned_max_cached_size_mb": _parse_pinned_mb("pinned_max_cached_size"),
    "graph_capture_record_stream_reuse": _parse_bool("graph_capture_record_stream_reuse"),
    "throw_on_cudamalloc_oom": _parse_bool("throw_on_cudamalloc_oom"),
    "per_process_memory_fraction": _parse_fraction,
    "backend": _parse_backend,
}


def parse_alloc_conf(env: str | None = "") -> AllocatorConfig:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string into a fresh :class:`AllocatorConfig`."""
    return AllocatorConfig.parse(env)


def alloc_conf_from_environ(environ) -> str:
    """The settings string PyTorch reads from ``environ``: the first variable that is set."""
    for name in ENV_VARS:
        value = environ.get(name)
        if value is not None:
            return value
    return ""
