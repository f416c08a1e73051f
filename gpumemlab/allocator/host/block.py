"""Pinned host blocks, the reserve segment and the host's pinnable memory.

``HostBlock`` is c10 ``HostBlock<S>`` (size, ptr, allocated, event_count, streams) plus what the
model needs to draw it (the requested size, how it was pinned). ``PinnedReserveSegment`` is c10's:
one region pinned in advance whose pointer only moves up; blocks carved from it are never given
back. ``HostMemory`` stands for the host's RAM as ``cudaHostAlloc``/``cudaHostRegister`` see it:
addresses come from a bump pointer (deterministic, page aligned; the OS's would differ), and a
pin that does not fit the host's pinnable bytes fails as the CUDA call does.
"""
from __future__ import annotations

from collections import deque

from .constants import PAGE_SIZE
from .rounding import reserve_carve

HOST_BASE_ADDRESS = 0x7F0000000000  # where the model's host addresses start (user space)


class HostBlock:
    """c10 ``HostBlock``: one pinned block; the caching host allocator never splits it."""

    __slots__ = ("size", "ptr", "allocated", "event_count", "streams", "requested_size",
                 "use_register", "from_reserve", "alloc_time", "frames")

    def __init__(self, size: int, ptr: int):
        self.size = size
        self.ptr = ptr
        self.allocated = False
        self.event_count = 0
        self.streams: dict = {}  # an ordered set: streams the block was used on (record_event)
        self.requested_size = 0  # the caller's bytes behind the current use (for snapshots)
        self.use_register = False  # cudaHostRegister (True) or cudaHostAlloc
        self.from_reserve = False  # carved from the PinnedReserveSegment
        self.alloc_time = 0
        self.frames = None

    def __repr__(self):
        state = "allocated" if self.allocated else ("pending" if self.event_count else "free")
        return f"<HostBlock {self.size} B at {self.ptr:#x} {state}>"


class PinnedReserveSegment:
    """c10 ``PinnedReserveSegment``: carve blocks (rounded to 4 KiB) until it is full."""

    def __init__(self, start: int = 0, size: int = 0):
        self.start = start
        self.size = size
        self.current = start
        self.initialized = size > 0

    def allocate(self, nbytes: int):
        rounded = reserve_carve(nbytes)
        if self.current + rounded > self.start + self.size:
            return None
        ptr = self.current
        self.current += rounded
        return ptr

    def owns(self, ptr: int) -> bool:
        return self.start <= ptr < self.start + self.size


class HostOutOfMemory(Exception):
    """``cudaHostAlloc``/``cudaHostRegister`` could not pin the bytes (cudaErrorMemoryAllocation)."""


class HostMemory:
    """The host's pinnable bytes: ``total`` (None = unlimited) and what is pinned now."""

    def __init__(self, total=None):
        self.total = total
        self.pinned = 0
        self.peak_pinned = 0
        self.next_address = HOST_BASE_ADDRESS
        self.next_addresses = deque()  # addresses the next pins must return (replay)

    def reserve_next_address(self, ptr: int) -> None:
        """Make the next pin return ``ptr`` (used to replay a real recording's host trace)."""
        self.next_addresses.append(int(ptr))

    def pin(self, nbytes: int) -> int:
        if self.total is not None and self.pinned + nbytes > self.total:
            raise HostOutOfMemory(nbytes)
        if self.next_addresses:
            ptr = self.next_addresses.popleft()
        else:
            ptr = self.next_address
            self.next_address += -(-nbytes // PAGE_SIZE) * PAGE_SIZE
        self.pinned += nbytes
        self.peak_pinned = max(self.peak_pinned, self.pinned)
        return ptr

    def unpin(self, nbytes: int) -> None:
        self.pinned -= nbytes

    def free_bytes(self):
        return None if self.total is None else self.total - self.pinned
