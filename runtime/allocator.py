"""Caching device allocator with statistics (the CUDA caching allocator's idea).

Freed blocks stay reserved and are reused for requests of the same rounded size
on the same stream, which keeps driver calls (and page-table writes) off the hot
path. A block used on other streams (``record_stream``) is reusable only after
those streams pass the point where it was freed. When the driver runs out of
memory, every cached block is released and the allocation retried once.
"""
from __future__ import annotations

import logging
from collections import defaultdict

from driver import DriverError, DriverStatus
from runtime.errors import InvalidValueError, OutOfMemoryError

log = logging.getLogger("seed.runtime")

SMALL = 1 << 20
SMALL_ROUND = 512
LARGE_ROUND = 2 << 20


def rounded_size(nbytes: int) -> int:
    unit = SMALL_ROUND if nbytes < SMALL else LARGE_ROUND
    return -(-nbytes // unit) * unit


class Block:
    __slots__ = ("address", "size", "requested", "stream", "other_streams")

    def __init__(self, address, size, requested, stream):
        self.address, self.size, self.requested, self.stream = address, size, requested, stream
        self.other_streams = set()


class CachingAllocator:
    def __init__(self, driver, context, device: int):
        self.driver = driver
        self.context = context
        self.device = device
        self._live: dict[int, Block] = {}
        self._cached: dict[tuple, list[Block]] = defaultdict(list)  # (stream id, size) -> blocks
        self._deferred: list[tuple[Block, list]] = []  # freed blocks waiting for other streams
        self.allocated = self.reserved = self.requested = self.segments = 0
        self.peak_allocated = self.peak_reserved = self.peak_requested = 0
        self.peak_active = self.peak_segments = 0
        self.reset_accumulated()

    def reset_accumulated(self) -> None:
        """Zeroes the counters that only grow (torch's reset_accumulated_memory_stats)."""
        self.num_allocs = self.num_frees = self.cache_hits = 0
        self.num_driver_allocs = self.num_driver_frees = 0
        self.bytes_allocated_total = self.bytes_freed_total = 0
        self.num_ooms = self.num_retries = 0

    def malloc(self, nbytes: int, stream) -> int:
        size = rounded_size(nbytes)
        self._reclaim_deferred()
        pool = self._cached.get((stream.stream_id, size))
        if pool:
            block = pool.pop()
            self.cache_hits += 1
        else:
            block = Block(self._driver_allocate(size, nbytes), size, nbytes, stream)
        block.requested, block.stream = nbytes, stream
        self._live[block.address] = block
        self.allocated += size
        self.requested += nbytes
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_requested = max(self.peak_requested, self.requested)
        self.peak_active = max(self.peak_active, len(self._live))
        self.num_allocs += 1
        self.bytes_allocated_total += size
        return block.address

    def _driver_allocate(self, size: int, requested: int) -> int:
        for attempt in range(2):
            try:
                address = self.driver.allocate(self.context, size)
            except DriverError as err:
                if err.status != DriverStatus.OUT_OF_MEMORY:
                    raise
                if attempt == 0:
                    log.info("emu:%d: %d bytes do not fit; releasing %d cached bytes and retrying",
                             self.device, size, self.reserved - self.allocated)
                    self.num_retries += 1
                    self.empty_cache()
                    continue
                self.num_ooms += 1
                free, total = self.driver.memory_info(self.device)
                raise OutOfMemoryError(self.device, requested, self.allocated, self.reserved,
                                       free, total) from err
            self.reserved += size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            self.segments += 1
            self.peak_segments = max(self.peak_segments, self.segments)
            self.num_driver_allocs += 1
            return address
        raise AssertionError("unreachable")

    def free(self, address: int) -> None:
        block = self._live.pop(address, None)
        if block is None:
            raise InvalidValueError(f"emu:{self.device}: 0x{address:x} is not a live allocation "
                                    f"(double free, or not allocated here)")
        self.allocated -= block.size
        self.requested -= block.requested
        self.num_frees += 1
        self.bytes_freed_total += block.size
        if block.other_streams:
            marks = [(s, s.record_mark()) for s in block.other_streams]
            block.other_streams = set()
            self._deferred.append((block, marks))
        else:
            self._cached[(block.stream.stream_id, block.size)].append(block)

    def record_stream(self, address: int, stream) -> None:
        block = self._find(address)
        if block is not None and stream is not block.stream:
            block.other_streams.add(stream)

    def _find(self, address: int):
        block = self._live.get(address)
        if block is not None:
            return block
        for block in self._live.values():
            if block.address <= address < block.address + block.size:
                return block
        return None

    def _reclaim_deferred(self) -> None:
        if not self._deferred:
            return
        waiting = []
        for block, marks in self._deferred:
            if all(stream.mark_passed(mark) for stream, mark in marks):
                self._cached[(block.stream.stream_id, block.size)].append(block)
            else:
                waiting.append((block, marks))
        self._deferred = waiting

    def empty_cache(self) -> None:
        """Returns every cached block to the driver (deferred ones after their streams pass)."""
        for block, marks in self._deferred:
            for stream, mark in marks:
                stream.wait_mark(mark)
        self._reclaim_deferred()
        for blocks in self._cached.values():
            for block in blocks:
                self.driver.release(self.context, block.address)
                self.reserved -= block.size
                self.segments -= 1
                self.num_driver_frees += 1
        self._cached.clear()

    def reset_peak(self) -> None:
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved
        self.peak_requested = self.requested
        self.peak_active = len(self._live)
        self.peak_segments = self.segments

    def stats(self) -> dict:
        """Statistics in torch.cuda.memory_stats() naming (one pool: "all")."""
        active = len(self._live)
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak_allocated,
            "allocated_bytes.all.allocated": self.bytes_allocated_total,
            "allocated_bytes.all.freed": self.bytes_freed_total,
            "active_bytes.all.current": self.allocated,
            "active_bytes.all.peak": self.peak_allocated,
            "requested_bytes.all.current": self.requested,
            "requested_bytes.all.peak": self.peak_requested,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.peak_reserved,
            "allocation.all.current": active,
            "allocation.all.peak": self.peak_active,
            "allocation.all.allocated": self.num_allocs,
            "allocation.all.freed": self.num_frees,
            "active.all.current": active,
            "active.all.peak": self.peak_active,
            "active.all.allocated": self.num_allocs,
            "active.all.freed": self.num_frees,
            "segment.all.current": self.segments,
            "segment.all.peak": self.peak_segments,
            "segment.all.allocated": self.num_driver_allocs,
            "segment.all.freed": self.num_driver_frees,
            "num_alloc_retries": self.num_retries,
            "num_ooms": self.num_ooms,
            "num_cache_hits": self.cache_hits,
            "num_device_alloc": self.num_driver_allocs,
            "num_device_free": self.num_driver_frees,
        }
