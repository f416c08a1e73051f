"""Which expandable segment a mapped range belongs to: c10's ``ExpandableSegment`` reserves one
virtual range (``total + total / 8`` of the device's memory, rounded up to whole pages) and maps
pages into it, so a snapshot or a trace shows one expandable segment as several mapped runs with
gaps where pages were unmapped. This groups the runs back into their reservations.

A reservation is known by its base: the address of the first page it ever mapped (a trace's first
``segment_map`` there, or the lowest mapped run of a snapshot). An address belongs to the
reservation of its stream and pool with the highest base at or below it, when it lies within the
reserved span (when the device's memory is not known, within any distance).
"""
from __future__ import annotations

from gpumemlab.allocator.constants import K_LARGE_BUFFER, K_SMALL_BUFFER


def page_size(pool: str) -> int:
    """The page an expandable segment maps: 2 MiB in the small pool, 20 MiB in the large."""
    return K_SMALL_BUFFER if pool == "small" else K_LARGE_BUFFER


def reserved_span(total_memory, pool: str = "large"):
    """Bytes of virtual address space one expandable segment reserves, or None if unknown."""
    if not total_memory:
        return None
    page = page_size(pool)
    return -(-(total_memory + total_memory // 8) // page) * page


class Reservations:
    """Expandable segments' virtual ranges, named ``seg_N`` by the caller's counter."""

    def __init__(self, total_memory=None):
        self.total_memory = total_memory
        self.bases = []   # [(base, stream, pool, name)]

    def find(self, address: int, stream=None, pool=None):
        """(base, name) of the reservation holding ``address``, or None."""
        best = None
        for base, st, pl, name in self.bases:
            if (stream is not None and st != stream) or (pool is not None and pl != pool):
                continue
            span = reserved_span(self.total_memory, pl)
            if base <= address and (span is None or address < base + span) and \
                    (best is None or base > best[0]):
                best = (base, name)
        return best

    def add(self, base: int, stream: int, pool: str, name: str) -> tuple:
        self.bases.append((base, stream, pool, name))
        return base, name
