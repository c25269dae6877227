"""Caching device allocator: segments, blocks and stream-ordered frees (CUDA's design).

- Requests are rounded up to 512 bytes. Requests of at most 1 MiB come from the
  small pool: 2 MiB segments carved into blocks. Larger ones come from the large
  pool: a 20 MiB segment for requests under 10 MiB, else a segment of the request
  rounded up to 2 MiB. A segment is one driver allocation (one contiguous, mapped
  range), so a kernel still sees each operand as one host view.
- A request takes the best-fitting free block of its pool *on its stream* (the
  smallest that fits, then the lowest address) and splits off the rest when the
  rest is worth keeping (>= 512 bytes in the small pool, > 1 MiB in the large one).
  A freed block merges with its free neighbours.
- Frees are stream-ordered. Reuse on the block's own stream is safe at once: the
  stream runs its work in order. A block that ``record_stream`` named other
  streams for waits until each of them passed the point of the free (a fence mark
  recorded on each, the event of CUDA's allocator). A segment goes back to the
  driver (``empty_cache``, or the retry after an out-of-memory) only once its
  stream has passed the last free of any of its blocks.
- Statistics mean what ``torch.cuda.memory_stats()`` means, per pool ("all",
  "small_pool", "large_pool"): allocated = live blocks, active = live blocks plus
  those waiting for other streams, reserved = segments, inactive_split = free
  blocks of split segments, requested = the bytes asked for.

Left out: expandable segments, per-process memory fractions, graph pools.
"""
from __future__ import annotations

import bisect
import logging

from driver import DriverError, DriverStatus
from runtime.errors import InvalidValueError, OutOfMemoryError

log = logging.getLogger("seed.runtime")
_insort, _bisect_left = bisect.insort, bisect.bisect_left

MiB = 1 << 20
MIN_BLOCK = 512            # every request is rounded up to a multiple of this
SMALL_SIZE = 1 * MiB       # largest request served by the small pool
SMALL_SEGMENT = 2 * MiB    # the small pool's segment size
LARGE_SEGMENT = 20 * MiB   # segment for large requests below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 * MiB
ROUND_LARGE = 2 * MiB      # larger requests get a segment of their own, rounded to this

POOLS = ("all", "small_pool", "large_pool")
_SMALL, _LARGE = 1, 2


def rounded_size(nbytes: int) -> int:
    """The block size a request of ``nbytes`` takes."""
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    """The driver allocation a new segment for a block of ``size`` (rounded) bytes takes."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
         "active_bytes", "inactive_split_bytes", "requested_bytes")
(ALLOCATION, SEGMENT, ACTIVE, INACTIVE_SPLIT, ALLOCATED_BYTES, RESERVED_BYTES, ACTIVE_BYTES,
 INACTIVE_SPLIT_BYTES, REQUESTED_BYTES) = range(0, 3 * len(STATS), 3)


class Stats:
    """torch's memory statistics: for each (statistic, pool) its current value, peak, and lifetime
    allocated/freed totals. Flat lists indexed by statistic + pool (0 "all", 1 small, 2 large):
    the allocator updates several on every malloc and free, so each update is a few list ops."""

    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self):
        n = 3 * len(STATS)
        self.current, self.peak, self.allocated, self.freed = [0] * n, [0] * n, [0] * n, [0] * n

    def increase(self, pool: int, changes) -> None:
        """``changes``: (statistic, amount) pairs, applied to "all" and to ``pool``."""
        current, peak, allocated = self.current, self.peak, self.allocated
        for stat, amount in changes:
            value = current[stat] + amount
            current[stat] = value
            allocated[stat] += amount
            if value > peak[stat]:
                peak[stat] = value
            i = stat + pool
            value = current[i] + amount
            current[i] = value
            allocated[i] += amount
            if value > peak[i]:
                peak[i] = value

    def decrease(self, pool: int, changes) -> None:
        current, freed = self.current, self.freed
        for stat, amount in changes:
            current[stat] -= amount
            freed[stat] += amount
            i = stat + pool
            current[i] -= amount
            freed[i] += amount

    # The hot paths' updates, unrolled (the same as increase/decrease with these changes): a loop
    # over (statistic, amount) pairs built on every call cost more than the allocation itself.
    def on_malloc(self, pool: int, size: int, nbytes: int) -> None:
        """increase(pool, ((ALLOCATION, 1), (ALLOCATED_BYTES, size), (ACTIVE, 1), (ACTIVE_BYTES, size),
        (REQUESTED_BYTES, nbytes)))"""
        current, peak, allocated = self.current, self.peak, self.allocated
        for i in (ALLOCATION, ALLOCATION + pool, ACTIVE, ACTIVE + pool):
            value = current[i] = current[i] + 1
            allocated[i] += 1
            if value > peak[i]:
                peak[i] = value
        for i in (ALLOCATED_BYTES, ALLOCATED_BYTES + pool, ACTIVE_BYTES, ACTIVE_BYTES + pool):
            value = current[i] = current[i] + size
            allocated[i] += size
            if value > peak[i]:
                peak[i] = value
        for i in (REQUESTED_BYTES, REQUESTED_BYTES + pool):
            value = current[i] = current[i] + nbytes
            allocated[i] += nbytes
            if value > peak[i]:
                peak[i] = value

    def on_free(self, pool: int, size: int, requested: int) -> None:
        """decrease(pool, ((ALLOCATION, 1), (ALLOCATED_BYTES, size), (REQUESTED_BYTES, requested)))"""
        current, freed = self.current, self.freed
        i = ALLOCATION + pool
        current[ALLOCATION] -= 1
        current[i] -= 1
        freed[ALLOCATION] += 1
        freed[i] += 1
        i = ALLOCATED_BYTES + pool
        current[ALLOCATED_BYTES] -= size
        current[i] -= size
        freed[ALLOCATED_BYTES] += size
        freed[i] += size
        i = REQUESTED_BYTES + pool
        current[REQUESTED_BYTES] -= requested
        current[i] -= requested
        freed[REQUESTED_BYTES] += requested
        freed[i] += requested

    def change_pair(self, pool: int, count_stat: int, bytes_stat: int, sign: int, size: int) -> None:
        """increase (sign 1) or decrease (sign -1) of (count_stat, 1), (bytes_stat, size)."""
        current = self.current
        j, k = count_stat + pool, bytes_stat + pool
        if sign > 0:
            peak, allocated = self.peak, self.allocated
            current[count_stat] += 1
            current[j] += 1
            current[bytes_stat] += size
            current[k] += size
            allocated[count_stat] += 1
            allocated[j] += 1
            allocated[bytes_stat] += size
            allocated[k] += size
            for i in (count_stat, j, bytes_stat, k):
                if current[i] > peak[i]:
                    peak[i] = current[i]
        else:
            freed = self.freed
            current[count_stat] -= 1
            current[j] -= 1
            current[bytes_stat] -= size
            current[k] -= size
            freed[count_stat] += 1
            freed[j] += 1
            freed[bytes_stat] += size
            freed[k] += size


class Segment:
    __slots__ = ("address", "size", "stream", "pool", "first", "free_mark")

    def __init__(self, address: int, size: int, stream, pool: int):
        self.address, self.size, self.stream, self.pool = address, size, stream, pool
        self.first: Block | None = None
        self.free_mark = 0  # the segment stream's mark that covers the last free of any block


class Block:
    __slots__ = ("segment", "address", "size", "requested", "allocated", "prev", "next", "other_streams",
                 "pending")

    def __init__(self, segment: Segment, address: int, size: int):
        self.segment, self.address, self.size = segment, address, size
        self.requested = 0
        self.allocated = False
        self.pending = False          # freed, waiting for other streams to pass the free
        self.prev: Block | None = None
        self.next: Block | None = None
        self.other_streams: set | None = None

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def key(self) -> tuple:
        return (self.segment.stream.stream_id, self.size, self.address)


class FreePool:
    """Free blocks of one pool, ordered by (stream, size, address): a bisect finds the best fit."""

    __slots__ = ("keys", "blocks")

    def __init__(self):
        self.keys: list[tuple] = []
        self.blocks: dict[tuple, Block] = {}

    def insert(self, block: Block) -> None:
        key = (block.segment.stream.stream_id, block.size, block.address)   # block.key()
        _insort(self.keys, key)
        self.blocks[key] = block

    def remove(self, block: Block) -> None:
        key = (block.segment.stream.stream_id, block.size, block.address)
        del self.keys[_bisect_left(self.keys, key)]
        del self.blocks[key]

    def best_fit(self, stream_id: int, size: int) -> Block | None:
        keys = self.keys
        i = bisect.bisect_left(keys, (stream_id, size, 0))
        if i < len(keys) and keys[i][0] == stream_id:
            return self.blocks[keys[i]]
        return None


class CachingAllocator:
    def __init__(self, driver, context, device: int):
        self.driver = driver
        self.context = context
        self.device = device
        self._live: dict[int, Block] = {}
        self._segments: dict[int, Segment] = {}
        self._pools = {_SMALL: FreePool(), _LARGE: FreePool()}
        self._pending: list[tuple[Block, list]] = []   # (block, [(stream, mark)]) after record_stream
        self._busy = False
        self._deferred_frees: list[int] = []
        self._stats = Stats()
        self.reset_accumulated()

    # -- the public entry points -------------------------------------------
    # A tensor's deleter can run in the middle of an allocator call (Python's cyclic GC may
    # collect tensors whenever an object is allocated, and the device's deleter frees at once),
    # while a block is half taken or half merged. Such a free is deferred until the outer call is
    # done, so every call sees the allocator in a consistent state.
    def malloc(self, nbytes: int, stream) -> int:
        self._busy = True
        try:
            return self._malloc(nbytes, stream)
        finally:
            self._busy = False
            if self._deferred_frees:
                self._drain_deferred_frees()

    def free(self, address: int) -> None:
        if self._busy:
            self._deferred_frees.append(address)
            return
        self._busy = True
        try:
            self._free(address)
        finally:
            self._busy = False
            if self._deferred_frees:
                self._drain_deferred_frees()

    def _drain_deferred_frees(self) -> None:
        while self._deferred_frees:
            address = self._deferred_frees.pop()
            self._busy = True
            try:
                self._free(address)
            except InvalidValueError:  # a deleter's double free: an internal bug, never the caller's
                log.error("emu:%d: deferred free of 0x%x: not a live allocation", self.device, address)
            finally:
                self._busy = False

    def _malloc(self, nbytes: int, stream) -> int:
        size = -(-nbytes // MIN_BLOCK) * MIN_BLOCK if nbytes > MIN_BLOCK else MIN_BLOCK   # rounded_size
        pool = _SMALL if size <= SMALL_SIZE else _LARGE
        if self._pending:
            self._reclaim_pending()
        free_pool = self._pools[pool]
        keys = free_pool.keys                     # FreePool.best_fit, inlined
        stream_id = stream.stream_id
        i = _bisect_left(keys, (stream_id, size, 0))
        if i < len(keys) and keys[i][0] == stream_id:
            key = keys[i]
            block = free_pool.blocks.pop(key)     # _take_free, inlined
            del keys[i]
            if block.prev is not None or block.next is not None:
                self._stats.change_pair(pool, INACTIVE_SPLIT, INACTIVE_SPLIT_BYTES, -1, block.size)
            self.cache_hits += 1
        else:
            block = self._new_segment(size, nbytes, stream, pool).first
        block.allocated = True  # before the split: a merge must never take a block being handed out
        if block.size - size >= (MIN_BLOCK if pool == _SMALL else SMALL_SIZE + 1):
            self._split(block, size)
        block.requested = nbytes
        self._live[block.address] = block
        self._stats.on_malloc(pool, block.size, nbytes)
        return block.address

    def _free(self, address: int) -> None:
        block = self._live.pop(address, None)
        if block is None:
            raise InvalidValueError(f"emu:{self.device}: 0x{address:x} is not a live allocation "
                                    f"(double free, or not allocated here)")
        segment = block.segment
        self._stats.on_free(segment.pool, block.size, block.requested)
        block.allocated = False
        # Covered by the next mark the segment's stream records (no command on this path).
        segment.free_mark = segment.stream.pending_mark()
        if block.other_streams:
            marks = [(st, st.record_mark()) for st in block.other_streams]
            block.other_streams = None
            block.pending = True
            self._pending.append((block, marks))
        else:
            self._free_block(block)

    def record_stream(self, address: int, stream) -> None:
        """``stream`` also uses the block at ``address``: its free waits for that stream too."""
        block = self._find(address)
        if block is not None and stream is not block.segment.stream:
            if block.other_streams is None:
                block.other_streams = set()
            block.other_streams.add(stream)

    def empty_cache(self) -> None:
        """Returns every wholly free segment to the driver, once its streams passed its frees."""
        if self._busy:  # reached from inside an allocator call (the OOM retry): already guarded
            return self._empty_cache()
        self._busy = True
        try:
            self._empty_cache()
        finally:
            self._busy = False
            if self._deferred_frees:
                self._drain_deferred_frees()

    def _empty_cache(self) -> None:
        for block, marks in self._pending:
            for stream, mark in marks:
                stream.wait_mark(mark)
        self._reclaim_pending()
        released = self._release_free_segments()
        if released:
            log.info("emu:%d: empty_cache returned %d segments to the driver", self.device, released)

    # -- blocks and segments -------------------------------------------------
    def _new_segment(self, size: int, requested: int, stream, pool: int) -> Segment:
        nbytes = segment_size(size)
        address = self._driver_allocate(nbytes, requested)
        segment = Segment(address, nbytes, stream, pool)
        segment.first = Block(segment, address, nbytes)
        self._segments[address] = segment
        self._stats.increase(pool, ((SEGMENT, 1), (RESERVED_BYTES, nbytes)))
        self.num_driver_allocs += 1
        return segment

    def _driver_allocate(self, nbytes: int, requested: int) -> int:
        try:
            return self.driver.allocate(self.context, nbytes)
        except DriverError as err:
            if err.status != DriverStatus.OUT_OF_MEMORY:
                raise
        # Like CUDA: give the cached segments back (after their streams passed their frees), then
        # try once more.
        log.info("emu:%d: %d bytes do not fit; releasing cached segments and retrying", self.device, nbytes)
        self.num_retries += 1
        self.empty_cache()
        try:
            return self.driver.allocate(self.context, nbytes)
        except DriverError as err:
            if err.status != DriverStatus.OUT_OF_MEMORY:
                raise
            self.num_ooms += 1
            free, total = self.driver.memory_info(self.device)
            raise OutOfMemoryError(self.device, requested, self.allocated, self.reserved, free, total) from err

    def _split(self, block: Block, size: int) -> None:
        rest = Block(block.segment, block.address + size, block.size - size)
        rest.prev, rest.next = block, block.next
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = size
        self._insert_free(rest)

    def _take_free(self, block: Block) -> None:
        pool = block.segment.pool
        self._pools[pool].remove(block)
        if block.prev is not None or block.next is not None:  # is_split
            self._stats.change_pair(pool, INACTIVE_SPLIT, INACTIVE_SPLIT_BYTES, -1, block.size)

    def _insert_free(self, block: Block) -> None:
        pool = block.segment.pool
        self._pools[pool].insert(block)
        if block.prev is not None or block.next is not None:  # is_split
            self._stats.change_pair(pool, INACTIVE_SPLIT, INACTIVE_SPLIT_BYTES, 1, block.size)

    def _free_block(self, block: Block) -> None:
        """A block nobody uses any more: merge it with free neighbours and make it reusable."""
        self._stats.change_pair(block.segment.pool, ACTIVE, ACTIVE_BYTES, -1, block.size)
        block.pending = False
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated and not neighbour.pending:
                self._take_free(neighbour)
                if neighbour is block.prev:
                    block.address, block.prev = neighbour.address, neighbour.prev
                    if neighbour.prev is not None:
                        neighbour.prev.next = block
                    else:
                        block.segment.first = block
                else:
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
                block.size += neighbour.size
        self._insert_free(block)

    def _reclaim_pending(self) -> None:
        waiting = []
        for block, marks in self._pending:
            if all(stream.mark_passed(mark) for stream, mark in marks):
                self._free_block(block)
            else:
                waiting.append((block, marks))
        self._pending = waiting

    def _release_free_segments(self) -> int:
        released = 0
        for segment in list(self._segments.values()):
            block = segment.first
            if block.allocated or block.pending or block.next is not None:
                continue
            # Queued work of the segment's stream may still read it: wait until the stream passed
            # the last free. (A wait costs nothing if the device is already there.)
            if not segment.stream.mark_passed(segment.free_mark):
                segment.stream.wait_mark(segment.free_mark)
            self._take_free(block)
            self.driver.release(self.context, segment.address)
            del self._segments[segment.address]
            self._stats.decrease(segment.pool, ((SEGMENT, 1), (RESERVED_BYTES, segment.size)))
            self.num_driver_frees += 1
            released += 1
        return released

    def _find(self, address: int) -> Block | None:
        block = self._live.get(address)
        if block is not None:
            return block
        for block in self._live.values():
            if block.address <= address < block.address + block.size:
                return block
        return None

    # -- statistics ----------------------------------------------------------
    @property
    def allocated(self) -> int:
        return self._stats.current[ALLOCATED_BYTES]

    @property
    def peak_allocated(self) -> int:
        return self._stats.peak[ALLOCATED_BYTES]

    @property
    def reserved(self) -> int:
        return self._stats.current[RESERVED_BYTES]

    @property
    def peak_reserved(self) -> int:
        return self._stats.peak[RESERVED_BYTES]

    def reset_accumulated(self) -> None:
        """Zeroes the counters that only grow (torch's reset_accumulated_memory_stats)."""
        n = 3 * len(STATS)
        self._stats.allocated, self._stats.freed = [0] * n, [0] * n
        self.cache_hits = self.num_driver_allocs = self.num_driver_frees = 0
        self.num_ooms = self.num_retries = 0

    def reset_peak(self) -> None:
        self._stats.peak = list(self._stats.current)

    def stats(self) -> dict:
        """Statistics in torch.cuda.memory_stats() naming."""
        out = {}
        s = self._stats
        for k, name in sorted(enumerate(STATS), key=lambda item: item[1]):
            for p, pool in enumerate(POOLS):
                i, prefix = 3 * k + p, f"{name}.{pool}."
                out[prefix + "current"] = s.current[i]
                out[prefix + "peak"] = s.peak[i]
                out[prefix + "allocated"] = s.allocated[i]
                out[prefix + "freed"] = s.freed[i]
        out.update({
            "num_alloc_retries": self.num_retries,
            "num_ooms": self.num_ooms,
            "num_cache_hits": self.cache_hits,
            "num_device_alloc": self.num_driver_allocs,
            "num_device_free": self.num_driver_frees,
            "num_sync_all_streams": 0,
        })
        return out

    def snapshot(self) -> list[dict]:
        """Segments and their blocks, in torch.cuda.memory_snapshot()'s layout."""
        segments = []
        for segment in sorted(self._segments.values(), key=lambda seg: seg.address):
            blocks = []
            block = segment.first
            while block is not None:
                state = ("active_allocated" if block.allocated else
                         "active_pending_free" if block.pending else "inactive")
                blocks.append({"address": block.address, "size": block.size,
                               "requested_size": block.requested if block.allocated else 0, "state": state})
                block = block.next
            segments.append({
                "device": self.device, "address": segment.address, "total_size": segment.size,
                "stream": segment.stream.stream_id,
                "segment_type": "small" if segment.pool == _SMALL else "large",
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                "requested_size": sum(b["requested_size"] for b in blocks),
                "blocks": blocks,
            })
        return segments
