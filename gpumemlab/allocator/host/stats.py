"""Host allocator statistics: c10 ``DurationStat``, ``HostStatsStaged``, ``HostStats`` and the
dict ``torch.cuda.memory.host_memory_stats()`` returns (torch 2.13).

The staged stats are what the allocator updates: ``allocations``/``allocated_bytes`` (every
block it owns, in use or cached) and four per-bucket Stats. ``get_stats`` turns them into
``HostStats`` as ``CachingHostAllocatorImpl::getStats`` does: ``active_requests`` and
``active_bytes`` are the per-bucket Stats summed field by field (peaks too, so the reported peak
is the sum of per-bucket peaks, PyTorch's "best-effort approximation"), and ``num_host_alloc`` /
``num_host_free`` are ``allocations.allocated`` / ``allocations.freed``.

The keys are those ``host_memory_stats()``'s docstring and PyTorch's test_host_memory_stats use:
``allocations``, ``allocated_bytes``, ``active_requests``, ``active_bytes`` (each
current/peak/allocated/freed), ``host_alloc_time`` / ``host_free_time`` (total/max/min/count/avg)
and ``num_host_alloc`` / ``num_host_free``. ``HostStats::bucket_allocation`` is not among the
documented keys and is left out. ``avg`` is total // count (0 when count is 0): the Python
binding that computes it was not reachable at the pinned revision, so that one rule is this
model's (see docs/SOURCE_MAP.md).
"""
from __future__ import annotations

from collections import OrderedDict

from ..stats import Stat
from .constants import MAX_SIZE_INDEX

CORE_STATS = ("allocations", "allocated_bytes", "active_requests", "active_bytes")
TIMING_STATS = ("host_alloc_time", "host_free_time")
STAT_FIELDS = ("current", "peak", "allocated", "freed")
DURATION_FIELDS = ("total", "max", "min", "count", "avg")


class DurationStat:
    """c10 ``DurationStat``: total, max, min (0 until the first value), count."""

    __slots__ = ("total", "max", "min", "count")

    def __init__(self):
        self.total = self.max = self.min = self.count = 0

    def increase(self, amount: int) -> None:
        self.total += amount
        self.count += 1
        self.max = max(amount, self.max)
        self.min = amount if self.min == 0 else min(amount, self.min)

    def reset_accumulated(self) -> None:
        self.total = 0
        self.count = 0

    def reset_peak(self) -> None:
        self.min = 0
        self.max = 0

    def as_dict(self) -> dict:
        avg = self.total // self.count if self.count else 0
        return {"total": self.total, "max": self.max, "min": self.min, "count": self.count,
                "avg": avg}

    def copy(self) -> "DurationStat":
        d = DurationStat()
        d.total, d.max, d.min, d.count = self.total, self.max, self.min, self.count
        return d


def _copy_stat(stat: Stat) -> Stat:
    s = Stat()
    s.current, s.peak, s.allocated, s.freed = stat.current, stat.peak, stat.allocated, stat.freed
    return s


class HostStatsStaged:
    """c10 ``HostStatsStaged``: what the allocator updates as it runs."""

    def __init__(self):
        self.allocations = Stat()
        self.allocated_bytes = Stat()
        self.active_bucket_stats = [Stat() for _ in range(MAX_SIZE_INDEX)]
        self.active_bytes_bucket_stats = [Stat() for _ in range(MAX_SIZE_INDEX)]
        self.allocation_bucket_stats = [Stat() for _ in range(MAX_SIZE_INDEX)]
        self.allocated_bytes_bucket_stats = [Stat() for _ in range(MAX_SIZE_INDEX)]
        self.host_alloc_time = DurationStat()
        self.host_free_time = DurationStat()

    def _all_stats(self):
        yield self.allocations
        yield self.allocated_bytes
        for bucket in (self.active_bucket_stats, self.active_bytes_bucket_stats,
                       self.allocation_bucket_stats, self.allocated_bytes_bucket_stats):
            yield from bucket

    def reset_accumulated(self) -> None:
        """``resetAccumulatedStats``."""
        for stat in self._all_stats():
            stat.reset_accumulated()
        self.host_alloc_time.reset_accumulated()
        self.host_free_time.reset_accumulated()

    def reset_peak(self) -> None:
        """``resetPeakStats``."""
        for stat in self._all_stats():
            stat.reset_peak()
        self.host_alloc_time.reset_peak()
        self.host_free_time.reset_peak()


class HostStats:
    """c10 ``HostStats``, as ``getStats`` builds it from the staged stats."""

    def __init__(self, staged: HostStatsStaged):
        self.allocations = _copy_stat(staged.allocations)
        self.allocated_bytes = _copy_stat(staged.allocated_bytes)
        self.num_host_alloc = self.allocations.allocated
        self.num_host_free = self.allocations.freed
        self.active_requests = Stat()
        self.active_bytes = Stat()
        self.bucket_allocation = [0] * MAX_SIZE_INDEX
        for i in range(MAX_SIZE_INDEX):
            _add_bucket(self.active_requests, staged.active_bucket_stats[i])
            _add_bucket(self.active_bytes, staged.active_bytes_bucket_stats[i])
            self.bucket_allocation[i] = staged.allocation_bucket_stats[i].allocated
        self.host_alloc_time = staged.host_alloc_time.copy()
        self.host_free_time = staged.host_free_time.copy()

    def as_nested_dict(self) -> dict:
        """``torch.cuda.memory.host_memory_stats_as_nested_dict()``."""
        nested = {name: getattr(self, name).as_dict() for name in CORE_STATS + TIMING_STATS}
        nested["num_host_alloc"] = self.num_host_alloc
        nested["num_host_free"] = self.num_host_free
        return nested


def _add_bucket(accumulator: Stat, other: Stat) -> None:
    # getStats' add_bucket_stats: every field summed, the peak included.
    accumulator.allocated += other.allocated
    accumulator.current += other.current
    accumulator.freed += other.freed
    accumulator.peak += other.peak


def flatten(nested: dict) -> "OrderedDict[str, int]":
    """``host_memory_stats()``: the nested dict flattened to "a.b" keys, sorted."""
    result = []
    for key, value in nested.items():
        if isinstance(value, dict):
            result.extend((f"{key}.{k}", v) for k, v in value.items())
        else:
            result.append((key, value))
    result.sort()
    return OrderedDict(result)


def host_stat_keys() -> list:
    """Every key ``host_memory_stats()`` returns, sorted."""
    keys = [f"{n}.{f}" for n in CORE_STATS for f in STAT_FIELDS]
    keys += [f"{n}.{f}" for n in TIMING_STATS for f in DURATION_FIELDS]
    keys += ["num_host_alloc", "num_host_free"]
    return sorted(keys)
