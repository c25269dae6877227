"""Device memory manager: physical allocation and per-context address spaces.

Physical memory is handed out first-fit from a sorted free list, page aligned,
one contiguous run per allocation (so a kernel sees each operand as one host
view). Each context gets its own virtual address space: a free list over a
per-device window (freed ranges are reused) plus the page-table entries the driver writes to the MMU.
"""
from __future__ import annotations

import bisect

VA_WINDOW = 1 << 40  # each device's virtual addresses live in [(d+1) * 2^40, (d+2) * 2^40)


class PhysicalAllocator:
    def __init__(self, capacity: int, page_size: int):
        self.capacity = capacity
        self.page_size = page_size
        self._free: list[tuple[int, int]] = [(0, capacity - capacity % page_size)]  # (start, size)
        self.used = 0

    def round_up(self, nbytes: int) -> int:
        return -(-nbytes // self.page_size) * self.page_size

    def allocate(self, nbytes: int) -> int | None:
        size = self.round_up(nbytes)
        for i, (start, free) in enumerate(self._free):
            if free >= size:
                if free == size:
                    del self._free[i]
                else:
                    self._free[i] = (start + size, free - size)
                self.used += size
                return start
        return None

    def release(self, start: int, nbytes: int) -> None:
        size = self.round_up(nbytes)
        i = bisect.bisect_left(self._free, (start, 0))
        self._free.insert(i, (start, size))
        # Coalesce with the neighbours so large allocations stay possible.
        if i + 1 < len(self._free) and start + size == self._free[i + 1][0]:
            self._free[i] = (start, size + self._free[i + 1][1])
            del self._free[i + 1]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == start:
            self._free[i - 1] = (self._free[i - 1][0], self._free[i - 1][1] + self._free[i][1])
            del self._free[i]
        self.used -= size

    @property
    def free_bytes(self) -> int:
        return sum(size for _, size in self._free)

    @property
    def largest_free(self) -> int:
        return max((size for _, size in self._free), default=0)


class AddressSpaceExhausted(Exception):
    """No free range of the requested size is left in a context's virtual address window."""


class AddressSpace:
    """A context's virtual addresses on one device: the window ``[(d+1) * 2^40, (d+2) * 2^40)``.

    Ranges are handed out first-fit from a sorted free list, each followed by an unmapped guard
    page (an overrun faults instead of reading the next allocation); released ranges coalesce and
    are reused. A request that does not fit in the window is refused: an address outside it
    would belong to another device.
    """

    def __init__(self, device: int, asid: int, page_size: int):
        self.device = device
        self.asid = asid
        self.page_size = page_size
        self.base = (device + 1) * VA_WINDOW
        self.limit = self.base + VA_WINDOW
        self._free = PhysicalAllocator(VA_WINDOW, page_size)  # the same free-list discipline, offsets
        self.mappings: dict[int, tuple[int, int]] = {}  # va -> (pa, size)

    def reserve(self, size: int) -> int:
        offset = self._free.allocate(size + self.page_size)
        if offset is None:
            raise AddressSpaceExhausted(
                f"device {self.device}: no {size}-byte range is free in address space {self.asid}'s "
                f"{VA_WINDOW >> 30} GiB window ({self._free.free_bytes} bytes free, largest free range "
                f"{self._free.largest_free})")
        return self.base + offset

    def release(self, va: int, size: int) -> None:
        self._free.release(va - self.base, size + self.page_size)
