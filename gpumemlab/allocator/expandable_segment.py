"""Expandable segments (c10 ``ExpandableSegment``, Note [Expandable Segments]).

One segment reserves a large virtual range (1 1/8 of the device's memory, rounded to pages)
and maps physical pages into it on demand: 2 MiB pages for the small pool, 20 MiB for the large
pool. ``map`` maps every page touched by a range, all or nothing; ``unmap`` releases only the
pages lying wholly inside a range. The reservation is first fit, unless a replay dictated its
base (``CudaDriver.reserve_next_va``).

c10 keeps one optional handle per page (``handles_``). The model keeps the mapped pages as
sorted, disjoint, non-touching ranges of page indices instead, so mapping or unmapping a range
costs a bisection and a list edit whatever its length: a recording that maps terabytes in
20 MiB pages replays in time proportional to its entries, not to its pages. The ranges are the
same set of pages c10's handles hold.
"""
from __future__ import annotations

from bisect import bisect_right


class ExpandableSegment:
    __slots__ = ("driver", "stream", "segment_size", "max_handles", "ptr", "reserved",
                 "_starts", "_ends")

    def __init__(self, driver, stream, address_space_size: int, segment_size: int):
        self.driver = driver
        self.stream = stream
        self.segment_size = segment_size  # page size
        self.max_handles = -(-address_space_size // segment_size)
        if driver.next_reservations:  # a replay dictates the base (cuMemAddressReserve's choice)
            self.ptr = driver.next_reservations.pop(0)
            self.reserved = driver.reserve_va_at(self.ptr, self.size())
        else:
            self.ptr = driver.reserve_va(self.size())
            self.reserved = self.size()  # address-space bytes claimed from the driver
        # mapped page indices: [_starts[i], _ends[i]) ascending, disjoint and never touching
        self._starts = []
        self._ends = []

    def size(self) -> int:
        return self.max_handles * self.segment_size

    def mapped_pages(self) -> int:
        """How many pages are mapped (c10: the handles that are set)."""
        return sum(e - s for s, e in zip(self._starts, self._ends))

    def mapped_ranges(self) -> list:
        """The mapped pages as ``[(first page, end page), ...]`` in address order."""
        return list(zip(self._starts, self._ends))

    def _segment_left(self, p: int) -> int:
        return (p - self.ptr) // self.segment_size

    def _segment_right(self, p: int) -> int:
        return -(-(p - self.ptr) // self.segment_size)

    def map(self, ptr: int, size: int) -> tuple:
        """Map the pages under [ptr, ptr+size). Returns the mapped (ptr, size); size 0 = OOM."""
        begin = self._segment_left(ptr)
        end = self._segment_right(ptr + size)
        if begin == end:
            return self._range(begin, end)
        nbytes = (end - begin) * self.segment_size
        if not self.driver.can_allocate(nbytes):
            return self._range(begin, begin)
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, begin)  # ranges before i start at or before begin
        assert (i == 0 or ends[i - 1] <= begin) and (i == len(starts) or end <= starts[i]), \
            "page already mapped"
        joins_left = i > 0 and ends[i - 1] == begin
        joins_right = i < len(starts) and starts[i] == end
        if joins_left and joins_right:
            ends[i - 1] = ends[i]
            del starts[i], ends[i]
        elif joins_left:
            ends[i - 1] = end
        elif joins_right:
            starts[i] = begin
        else:
            starts.insert(i, begin)
            ends.insert(i, end)
        self.driver.used_bytes += nbytes
        return self._range(begin, end)

    def unmap(self, ptr: int, size: int) -> tuple:
        """Unmap the pages wholly inside [ptr, ptr+size). Returns the unmapped (ptr, size)."""
        begin = self._segment_right(ptr)
        end = self._segment_left(ptr + size)
        if begin >= end:
            return ptr, 0
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, begin) - 1  # the range that must hold every page
        assert i >= 0 and end <= ends[i], "page not mapped"
        first, last = starts[i], ends[i]
        if first < begin and end < last:
            ends[i] = begin
            starts.insert(i + 1, end)
            ends.insert(i + 1, last)
        elif first < begin:
            ends[i] = begin
        elif end < last:
            starts[i] = end
        else:
            del starts[i], ends[i]
        self.driver.used_bytes -= (end - begin) * self.segment_size
        return self._range(begin, end)

    def release(self) -> None:
        """Free the reserved address range (``~ExpandableSegment``)."""
        assert not self._starts, "releasing an expandable segment with mapped pages"
        if self.reserved:
            self.driver.release_va(self.ptr, self.reserved)

    def _range(self, begin: int, end: int) -> tuple:
        return self.ptr + self.segment_size * begin, self.segment_size * (end - begin)
