"""The allocator model: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) in
pure Python. Standard library only, deterministic, no printing. See docs/SOURCE_MAP.md for the
c10 symbol each name follows and what is not modelled.
"""
from .block import Block, BlockPool
from .caching_allocator import AllocParams, DeviceCachingAllocator
from .config import (ENV_VARS, AllocatorConfig, AllocatorConfigError, alloc_conf_from_environ,
                     parse_alloc_conf)
from .constants import (K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE,
                        K_SMALL_BUFFER, K_SMALL_SIZE, ONE_EXA_BYTES, PYTORCH_REF, SIZE_MAX)
from .driver import AddressInUseError, CudaDriver, CudaError
from .invariants import InvariantError, check_invariants
from .oom import OutOfMemoryError
from .rounding import get_allocation_size, round_size, roundup_power2_next_division
from .sizes import format_size
from .summary import memory_summary

__all__ = [
    "Block", "BlockPool", "AllocParams", "DeviceCachingAllocator", "ENV_VARS", "AllocatorConfig",
    "AllocatorConfigError", "alloc_conf_from_environ", "parse_alloc_conf", "K_LARGE_BUFFER",
    "K_MIN_BLOCK_SIZE", "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE", "K_SMALL_BUFFER", "K_SMALL_SIZE",
    "ONE_EXA_BYTES", "PYTORCH_REF", "SIZE_MAX", "AddressInUseError", "CudaDriver", "CudaError", "InvariantError",
    "check_invariants", "OutOfMemoryError", "get_allocation_size", "round_size",
    "roundup_power2_next_division", "format_size", "memory_summary",
]
