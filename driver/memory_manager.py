"""Device memory manager: physical allocation and per-context address spaces.

Physical memory is handed out first-fit from a sorted free list, page aligned,
one contiguous run per allocation (so a kernel sees each operand as one host
view). Each context gets its own virtual address space: a bump allocator in a
per-device window plus the page-table entries the driver writes to the MMU.
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


class AddressSpace:
    def __init__(self, device: int, asid: int, page_size: int):
        self.device = device
        self.asid = asid
        self.page_size = page_size
        self._next_va = (device + 1) * VA_WINDOW
        self.mappings: dict[int, tuple[int, int]] = {}  # va -> (pa, size)

    def reserve(self, size: int) -> int:
        va = self._next_va
        self._next_va += size + self.page_size  # a guard page between allocations
        return va
