"""The simulated CUDA driver under the allocator: physical capacity, cudaMalloc/cudaFree,
cuMemAddressReserve/cuMemCreate for expandable segments, and cudaMemGetInfo.

It is the only source of addresses, and it is deterministic: virtual addresses come from a
first-fit search of a free list starting at a fixed base, aligned to 2 MiB. The real driver's
address choice is not documented; a replay can instead dictate the next address
(``reserve_next_address``) and the base of the next expandable segment's reservation
(``reserve_next_va``) so that a recorded run is reproduced exactly. Not modelled: memory
of the CUDA context and other processes is only a number (``other_bytes``, 0 by default), and
driver-side rounding of physical pages is not modelled.
"""
from __future__ import annotations

from bisect import bisect_right, insort

VA_BASE = 0x7F0000000000  # a typical address of a CUDA allocation on Linux
VA_LIMIT = VA_BASE + (1 << 46)  # 64 TiB of simulated virtual address space
VA_ALIGN = 2097152


class AddressInUseError(ValueError):
    """A dictated address overlaps memory that is already mapped."""


class CudaError(RuntimeError):
    """A CUDA runtime call failed: what c10's ``C10_CUDA_CHECK`` raises (``torch.AcceleratorError``,
    a RuntimeError, in newest PyTorch). ``error`` is the cudaError_t name."""

    def __init__(self, error: str, description: str, detail: str = ""):
        super().__init__(f"CUDA error: {description}" + (f" ({detail})" if detail else ""))
        self.error = error


class CudaDriver:
    """Physical memory of one simulated device plus its virtual address space."""

    def __init__(self, total_memory: int, other_bytes: int = 0):
        self.total_memory = int(total_memory)
        self.used_bytes = 0  # physical bytes handed out (cudaMalloc + mapped pages)
        # Memory in use outside the caching allocator: the CUDA context, other processes.
        self.other_bytes = int(other_bytes)
        self.free_ranges = [(VA_BASE, VA_LIMIT)]  # sorted, disjoint [start, end)
        self.next_addresses = []  # dictated addresses for the next cudaMalloc calls
        self.next_reservations = []  # dictated bases for the next cuMemAddressReserve calls
        self.segments = {}  # ptr -> size of live cudaMalloc allocations

    # --- physical memory -------------------------------------------------------------
    def mem_get_info(self) -> tuple:
        """(free, total) bytes, like cudaMemGetInfo."""
        return self.total_memory - self.used_bytes - self.other_bytes, self.total_memory

    def can_allocate(self, nbytes: int) -> bool:
        return self.used_bytes + self.other_bytes + nbytes <= self.total_memory

    # --- cudaMalloc / cudaFree -------------------------------------------------------
    def cuda_malloc(self, nbytes: int):
        """Return the address of ``nbytes`` of new device memory, or None when out of memory."""
        if not self.can_allocate(nbytes):
            return None
        if self.next_addresses:
            ptr = self.next_addresses.pop(0)
            self._take_range(ptr, nbytes)
        else:
            ptr = self.reserve_va(nbytes)
        self.used_bytes += nbytes
        self.segments[ptr] = nbytes
        return ptr

    def cuda_free(self, ptr: int) -> None:
        """cudaFree: ``ptr`` must be an address cudaMalloc returned, else cudaErrorInvalidValue."""
        nbytes = self.segments.pop(ptr, None)
        if nbytes is None:
            raise CudaError("cudaErrorInvalidValue", "invalid argument",
                            f"cudaFree({ptr:#x}): not an address that cudaMalloc returned")
        self.used_bytes -= nbytes
        self.release_va(ptr, nbytes)

    def reserve_next_address(self, ptr: int) -> None:
        """Make the next cudaMalloc return ``ptr`` (used to replay a real recording)."""
        self.next_addresses.append(int(ptr))

    def reserve_next_va(self, ptr: int) -> None:
        """Make the next expandable segment's address reservation start at ``ptr`` (replay)."""
        self.next_reservations.append(int(ptr))

    # --- virtual address space (also cuMemAddressReserve/Free) ----------------------------
    def reserve_va(self, nbytes: int) -> int:
        span = -(-nbytes // VA_ALIGN) * VA_ALIGN
        for i, (start, end) in enumerate(self.free_ranges):
            if end - start >= span:
                if end - start == span:
                    del self.free_ranges[i]
                else:
                    self.free_ranges[i] = (start + span, end)
                return start
        raise MemoryError("simulated virtual address space exhausted")

    def reserve_va_at(self, ptr: int, nbytes: int) -> int:
        """Reserve address space at the dictated base ``ptr`` (2 MiB aligned); return the bytes
        claimed. The claim is clipped to the free range containing ``ptr``, and is 0 when ``ptr``
        lies in a range already claimed: a replay dictates the real reservation's base, but the
        model may have sized an earlier reservation larger than the real one (1 1/8 of an
        assumed capacity). A reservation holds no physical memory, so the clipped part is only
        missing from this bookkeeping."""
        if ptr % VA_ALIGN:
            raise ValueError(f"reservation base {ptr:#x} is not {VA_ALIGN}-byte aligned")
        span = -(-nbytes // VA_ALIGN) * VA_ALIGN
        i = bisect_right(self.free_ranges, (ptr, float("inf"))) - 1
        if i < 0 or not self.free_ranges[i][0] <= ptr < self.free_ranges[i][1]:
            return 0
        start, end = self.free_ranges[i]
        stop = min(ptr + span, end)
        pieces = []
        if start < ptr:
            pieces.append((start, ptr))
        if stop < end:
            pieces.append((stop, end))
        self.free_ranges[i:i + 1] = pieces
        return stop - ptr

    def release_va(self, ptr: int, nbytes: int) -> None:
        span = -(-nbytes // VA_ALIGN) * VA_ALIGN
        insort(self.free_ranges, (ptr, ptr + span))
        self._coalesce_around(ptr)

    def _take_range(self, ptr: int, nbytes: int) -> None:
        span = -(-nbytes // VA_ALIGN) * VA_ALIGN
        i = bisect_right(self.free_ranges, (ptr, float("inf"))) - 1
        if i < 0:
            raise AddressInUseError(f"address {ptr:#x} is not free in the simulated address space")
        start, end = self.free_ranges[i]
        if not (start <= ptr and ptr + span <= end):
            raise AddressInUseError(
                f"address range {ptr:#x}+{nbytes} overlaps memory that is already mapped")
        pieces = []
        if start < ptr:
            pieces.append((start, ptr))
        if ptr + span < end:
            pieces.append((ptr + span, end))
        self.free_ranges[i:i + 1] = pieces

    def _coalesce_around(self, ptr: int) -> None:
        ranges = self.free_ranges
        i = bisect_right(ranges, (ptr, float("inf"))) - 1
        lo = max(i - 1, 0)
        j = lo
        while j + 1 < len(ranges) and j <= i + 1:
            if ranges[j][1] >= ranges[j + 1][0]:
                ranges[j] = (ranges[j][0], max(ranges[j][1], ranges[j + 1][1]))
                del ranges[j + 1]
            else:
                j += 1
