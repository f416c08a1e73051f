"""Allocator statistics (c10 ``Stat``, ``DeviceStats``) and ``torch.cuda.memory_stats()``'s keys.

Each Stat tracks ``current``, ``peak``, ``allocated`` (cumulative increase) and ``freed``
(cumulative decrease). Array stats have one Stat per StatType: all, small_pool, large_pool.

c10 updates an array stat for the StatTypes a pool selects (``get_stat_types_for_pool``: the
aggregate and the pool's own type) with ``for_each_selected_stat_type``. Here a pool's selected
Stats are looked up once (:class:`SelectedStats`) and :func:`update_stat_array` is that loop.
"""
from __future__ import annotations

from collections import OrderedDict

from .constants import SIZE_MAX, STAT_TYPE_NAMES


class Stat:
    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self):
        self.current = 0
        self.peak = 0
        self.allocated = 0
        self.freed = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        if self.current > self.peak:
            self.peak = self.current
        self.allocated += amount

    def decrease(self, amount: int) -> None:
        # c10 only asserts current >= 0 in debug builds; oversize counters can drift below 0 when
        # max_split_size changes at run time, and the release build lets them.
        self.current -= amount
        self.freed += amount

    def reset_accumulated(self) -> None:
        self.allocated = 0
        self.freed = 0

    def reset_peak(self) -> None:
        self.peak = self.current

    def as_dict(self) -> dict:
        return {"current": self.current, "peak": self.peak,
                "allocated": self.allocated, "freed": self.freed}


ARRAY_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
            "num_device_free", "num_oom_rejections")


class DeviceStats:
    """All statistics of one device's allocator (c10 ``DeviceStats``)."""

    def __init__(self):
        for name in ARRAY_STATS:
            setattr(self, name, (Stat(), Stat(), Stat()))
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        for name in COUNTERS:
            setattr(self, name, 0)
        self.max_split_size = -1

    def reset_accumulated(self) -> None:
        for name in ARRAY_STATS:
            for stat in getattr(self, name):
                stat.reset_accumulated()
        for name in COUNTERS:
            setattr(self, name, 0)
        self.oversize_allocations.reset_accumulated()
        self.oversize_segments.reset_accumulated()

    def reset_peak(self) -> None:
        for name in ARRAY_STATS:
            for stat in getattr(self, name):
                stat.reset_peak()
        self.oversize_allocations.reset_peak()
        self.oversize_segments.reset_peak()

    def as_nested_dict(self) -> dict:
        """Like ``torch.cuda.memory_stats_as_nested_dict()``."""
        result = {name: getattr(self, name) for name in COUNTERS}
        result["max_split_size"] = self.max_split_size
        for name in ARRAY_STATS:
            result[name] = {STAT_TYPE_NAMES[i]: s.as_dict() for i, s in enumerate(getattr(self, name))}
        result["oversize_allocations"] = self.oversize_allocations.as_dict()
        result["oversize_segments"] = self.oversize_segments.as_dict()
        return result

    def as_flat_dict(self, extra=()) -> "OrderedDict[str, int]":
        """Like ``torch.cuda.memory_stats()``: dotted keys, sorted (``extra``: more flat
        (key, value) items, e.g. reserved_bytes_by_private_pools)."""
        flat = list(extra)

        def walk(prefix, obj):
            if isinstance(obj, dict):
                for key, value in obj.items():
                    walk(f"{prefix}.{key}" if prefix else key, value)
            else:
                flat.append((prefix, obj))

        walk("", self.as_nested_dict())
        flat.sort()
        return OrderedDict(flat)


class SelectedStats:
    """For one pool: each array stat's Stats of the selected StatTypes (c10
    ``get_stat_types_for_pool``), as a tuple per stat name, e.g. ``selected.allocation``.

    ``allocation_active`` and ``allocated_active_bytes`` join two stats that an allocation
    raises by the same amount (c10 ``alloc_found_block``), so one update does both."""

    __slots__ = ARRAY_STATS + ("allocation_active", "allocated_active_bytes")

    def __init__(self, stats: DeviceStats, stat_types: tuple):
        for name in ARRAY_STATS:
            stat_array = getattr(stats, name)
            setattr(self, name, tuple(stat_array[t] for t in stat_types))
        self.allocation_active = self.allocation + self.active
        self.allocated_active_bytes = self.allocated_bytes + self.active_bytes


def update_stat_array(selected: tuple, amount: int) -> None:
    """``for_each_selected_stat_type`` with c10's ``increase_stat`` (amount > 0) or
    ``decrease_stat`` (amount < 0) on each selected Stat. A decrease leaves the peak alone."""
    if amount >= 0:
        for stat in selected:
            current = stat.current + amount
            stat.current = current
            stat.allocated += amount
            if current > stat.peak:
                stat.peak = current
    else:
        for stat in selected:
            stat.current += amount
            stat.freed -= amount


def max_split_size_stat(max_split_size: int) -> int:
    """``static_cast<int64_t>(max_split_size)``: SIZE_MAX shows as -1."""
    return -1 if max_split_size == SIZE_MAX else max_split_size
