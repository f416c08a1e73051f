"""PyTorch's pinned host allocator (``at::CachingHostAllocatorImpl`` and CUDA's
``CUDACachingHostAllocatorImpl``, torch 2.13) in pure Python: standard library only,
deterministic. ``constants.HOST_PYTORCH_REF`` names the source; docs/SOURCE_MAP.md maps the
names; docs/ALLOCATOR.md ("Pinned host memory") explains the rules.
"""
from .block import HostBlock, HostMemory, PinnedReserveSegment
from .caching_host_allocator import CachingHostAllocator
from .constants import HOST_PYTORCH_REF, MAX_SIZE_INDEX
from .oom import CUDA_OOM_LINE, HostOutOfMemoryError, explain_host_oom
from .rounding import host_round_size, pinned_bytes, power_of_2_ceil, size_index
from .snapshot import host_segments, host_snapshot
from .stats import DurationStat, HostStats, HostStatsStaged, host_stat_keys

__all__ = [
    "HostBlock", "HostMemory", "PinnedReserveSegment", "CachingHostAllocator", "HOST_PYTORCH_REF",
    "MAX_SIZE_INDEX", "CUDA_OOM_LINE", "HostOutOfMemoryError", "explain_host_oom",
    "host_round_size", "pinned_bytes", "power_of_2_ceil", "size_index", "host_segments",
    "host_snapshot", "DurationStat", "HostStats", "HostStatsStaged", "host_stat_keys",
]
