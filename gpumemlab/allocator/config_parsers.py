"""The parsers of ``PYTORCH_CUDA_ALLOC_CONF`` values: c10 ``ConfigTokenizer``'s accessors and
one handler per key (``CUDAAllocatorConfig::parseArgs`` and its ``parse*`` helpers, c10/cuda/
CUDAAllocatorConfig.cpp, c10/core/AllocatorConfig.cpp). The table that names each key with its
handler is ``config.SETTINGS``. Errors carry PyTorch's messages.
"""
from __future__ import annotations

import math
import re

from .constants import K_MB, K_ROUNDUP_POWER2_INTERVALS, SIZE_MAX

_MAX_REGISTER_THREADS = 128  # c10: pinned_max_register_threads()


class AllocatorConfigError(ValueError, RuntimeError):
    """A bad allocator settings string (PyTorch raises ValueError or RuntimeError)."""


def is_power_of_2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


class Tokens(list):
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


def mib_to_bytes(value: int) -> int:
    """c10's MiB settings: clamped to SIZE_MAX / kMB, then shifted by 20 bits."""
    return min(value, SIZE_MAX // K_MB) * K_MB


def parse_mb_at_least_large_segment(attr):
    def handler(config, tokens, i, key):
        value = tokens.to_size_t(i)
        min_mb = config.large_segment_size // K_MB
        if value < min_mb:
            raise AllocatorConfigError(f"CachingAllocator option {key} too small, must be >= {min_mb}")
        setattr(config, attr, mib_to_bytes(value))
        return i
    return handler


def skip_large_segment_size(config, tokens, i, key):
    tokens.at(i)  # parsed in pass 1
    return i


def parse_gc_threshold(config, tokens, i, key):
    value = tokens.to_double(i)
    if not (0.0 < value < 1.0):
        raise AllocatorConfigError("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
    config.garbage_collection_threshold = value
    return i


def parse_roundup_power2_divisions(config, tokens, i, key):
    divisions = [0] * K_ROUNDUP_POWER2_INTERVALS
    if tokens.at(i) == "[":
        first_value = True
        last_index = 0
        i += 1
        while tokens.at(i) != "]":
            interval = tokens[i]
            value = tokens.to_size_t(i + 2)  # skips the ':'
            i += 2
            if value != 0 and not is_power_of_2(value):
                raise AllocatorConfigError(
                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
            if interval == ">":
                for j in range(last_index + 1, len(divisions)):
                    divisions[j] = value
            else:
                interval_mb = tokens.to_size_t(i - 2)
                if not is_power_of_2(interval_mb):
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
        if not is_power_of_2(value):
            raise AllocatorConfigError("For roundups, the divisions has to be power of 2 ")
        divisions = [value] * K_ROUNDUP_POWER2_INTERVALS
    config.roundup_power2_divisions_ = divisions
    return i


def parse_bool(attr):
    def handler(config, tokens, i, key):
        setattr(config, attr, tokens.to_bool(i))
        return i
    return handler


def parse_backend(config, tokens, i, key):
    value = tokens.at(i)
    if value not in ("native", "cudaMallocAsync"):
        raise AllocatorConfigError("Unknown allocator backend, options are native and cudaMallocAsync")
    if value != "native":
        raise AllocatorConfigError(
            "backend:cudaMallocAsync is not modelled by gpumemlab's simulated GPU, which models "
            "the native caching allocator only")
    config.backend = value
    return i


def parse_register_threads(config, tokens, i, key):
    value = tokens.to_size_t(i)
    if not is_power_of_2(value):
        raise AllocatorConfigError(f"Number of register threads has to be power of 2, got {value}")
    if value > _MAX_REGISTER_THREADS:
        raise AllocatorConfigError("Number of register threads should be less than or equal to "
                                   f"{_MAX_REGISTER_THREADS}, got {value}")
    config.pinned_num_register_threads = value
    return i


def parse_reserve_segment(config, tokens, i, key):
    value = tokens.to_size_t(i)
    if value <= 0:
        raise AllocatorConfigError("Pinned reserve segment size has to be greater than 0")
    config.pinned_reserve_segment_size_mb = value
    return i


def parse_pinned_mb(attr):
    # torch 2.13 libc10 parsePinnedMaxRoundThreshold / parsePinnedMaxCachedSize: the value is
    # read as the other MiB settings are, with no lower bound, so 0 is allowed.
    def handler(config, tokens, i, key):
        setattr(config, attr, mib_to_bytes(tokens.to_size_t(i)))
        return i
    return handler


def parse_fraction(config, tokens, i, key):
    value = tokens.to_double(i)
    if math.isnan(value) or not (0.0 <= value <= 1.0):
        raise AllocatorConfigError("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
    config.per_process_memory_fraction = value
    return i
