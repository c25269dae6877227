"""Memory management unit: per-context page tables and address translation.

Each context (address-space id) has a page table that the driver programs. The
table is kept as page-aligned extents (virtual start, length, physical start),
which is what a page table of contiguous pages amounts to, and translation is a
binary search. An access that is not entirely inside one mapped extent is a page
fault. Left out: TLBs and their miss latency, access permissions.
"""
from __future__ import annotations

import bisect
import threading

from emulator.config import MmuConfig
from emulator.errors import EmulatorBug, FaultRecord, PageFault


class PageTable:
    def __init__(self, asid: int):
        self.asid = asid
        self.starts: list[int] = []
        self.extents: list[tuple[int, int, int]] = []  # (va, length, pa), sorted by va

    def find(self, va: int):
        i = bisect.bisect_right(self.starts, va) - 1
        if i >= 0:
            start, length, pa = self.extents[i]
            if va < start + length:
                return i, start, length, pa
        return None


class MMU:
    def __init__(self, env, config: MmuConfig, device_index: int):
        self.env = env
        self.page_size = config.page_size_bytes
        self.device_index = device_index
        self._tables: dict[int, PageTable] = {}
        self._lock = threading.Lock()
        self.page_faults = 0
        # Bumped by every page-table change: whoever caches translations (firmware's
        # descriptor cache, like a TLB) must drop entries made under an older generation.
        self.generation = 0

    def create_address_space(self, asid: int) -> None:
        with self._lock:
            if asid in self._tables:
                raise EmulatorBug(f"address space {asid} already exists")
            self._tables[asid] = PageTable(asid)

    def destroy_address_space(self, asid: int) -> None:
        with self._lock:
            self._tables.pop(asid, None)
            self.generation += 1

    def map(self, asid: int, va: int, pa: int, length: int) -> None:
        if va % self.page_size or pa % self.page_size or length % self.page_size or length <= 0:
            raise EmulatorBug(f"unaligned mapping va=0x{va:x} pa=0x{pa:x} length={length}")
        with self._lock:
            table = self._tables[asid]
            i = bisect.bisect_right(table.starts, va)
            prev_end = table.extents[i - 1][0] + table.extents[i - 1][1] if i else -1
            next_start = table.starts[i] if i < len(table.starts) else None
            if va < prev_end or (next_start is not None and va + length > next_start):
                raise EmulatorBug(f"mapping at 0x{va:x} overlaps an existing one")
            table.starts.insert(i, va)
            table.extents.insert(i, (va, length, pa))
            self.generation += 1

    def unmap(self, asid: int, va: int) -> None:
        with self._lock:
            table = self._tables[asid]
            found = table.find(va)
            if found is None or found[1] != va:
                raise EmulatorBug(f"no mapping starts at 0x{va:x}")
            del table.starts[found[0]]
            del table.extents[found[0]]
            self.generation += 1

    def translate(self, asid: int, va: int, nbytes: int, unit: str = "mmu") -> int:
        """Physical address of ``[va, va + nbytes)``; raises PageFault if not all mapped."""
        table = self._tables.get(asid)
        found = table.find(va) if table is not None else None
        if found is not None and va + nbytes <= found[1] + found[2]:
            return found[3] + (va - found[1])
        self.page_faults += 1
        raise PageFault(FaultRecord(
            "page_fault", unit, self.device_index, va, self.env.now,
            f"{nbytes}-byte access in address space {asid} is not inside a mapping"))
