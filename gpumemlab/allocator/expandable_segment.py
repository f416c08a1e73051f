"""Expandable segments (c10 ``ExpandableSegment``, Note [Expandable Segments]).

One segment reserves a large virtual range (1 1/8 of the device's memory, rounded to pages)
and maps physical pages into it on demand: 2 MiB pages for the small pool, 20 MiB for the large
pool. ``map`` maps every page touched by a range, all or nothing; ``unmap`` releases only the
pages lying wholly inside a range. The reservation is first fit, unless a replay dictated its
base (``CudaDriver.reserve_next_va``).
"""
from __future__ import annotations


class ExpandableSegment:
    __slots__ = ("driver", "stream", "segment_size", "max_handles", "ptr", "handles", "reserved")

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
        self.handles = []  # True where a page is mapped

    def size(self) -> int:
        return self.max_handles * self.segment_size

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
        while len(self.handles) < end:
            self.handles.append(False)
        for i in range(begin, end):
            assert not self.handles[i], "page already mapped"
            self.handles[i] = True
        self.driver.used_bytes += nbytes
        return self._range(begin, end)

    def unmap(self, ptr: int, size: int) -> tuple:
        """Unmap the pages wholly inside [ptr, ptr+size). Returns the unmapped (ptr, size)."""
        begin = self._segment_right(ptr)
        end = self._segment_left(ptr + size)
        if begin >= end:
            return ptr, 0
        for i in range(begin, end):
            assert self.handles[i], "page not mapped"
            self.handles[i] = False
        self.driver.used_bytes -= (end - begin) * self.segment_size
        while self.handles and not self.handles[-1]:
            self.handles.pop()
        return self._range(begin, end)

    def release(self) -> None:
        """Free the reserved address range (``~ExpandableSegment``)."""
        assert not any(self.handles), "releasing an expandable segment with mapped pages"
        if self.reserved:
            self.driver.release_va(self.ptr, self.reserved)

    def _range(self, begin: int, end: int) -> tuple:
        return self.ptr + self.segment_size * begin, self.segment_size * (end - begin)
