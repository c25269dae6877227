"""Caching allocator (runtime/allocator.py) through the runtime: segments, blocks, best fit,
stream-ordered frees and torch-named statistics, checked against hand-computed layouts."""
import numpy as np
import pytest

import runtime
from runtime import TensorRef
from runtime.allocator import (LARGE_SEGMENT, MIN_BLOCK, SMALL_SEGMENT, rounded_size, segment_size)

MiB = 1 << 20
F32 = 8


def stats(rt, device=0):
    return rt.device(device).allocator.stats()


def driver_used(rt, device=0):
    free, total = rt.mem_get_info(device)
    return total - free


def test_rounded_and_segment_sizes():
    assert rounded_size(1) == MIN_BLOCK == 512
    assert rounded_size(512) == 512 and rounded_size(513) == 1024
    assert rounded_size(MiB + 1) == MiB + 512
    assert segment_size(512) == segment_size(MiB) == SMALL_SEGMENT == 2 * MiB
    assert segment_size(MiB + 512) == segment_size(10 * MiB - 512) == LARGE_SEGMENT == 20 * MiB
    assert segment_size(10 * MiB) == 10 * MiB and segment_size(11 * MiB + 512) == 12 * MiB


def test_a_thousand_tiny_tensors_share_one_small_segment(rt):
    before = driver_used(rt)
    blocks = [rt.malloc(0, 4) for _ in range(1000)]
    s = stats(rt)
    assert s["allocated_bytes.all.current"] == 1000 * 512
    assert s["requested_bytes.all.current"] == 4000
    assert s["reserved_bytes.all.current"] == s["reserved_bytes.small_pool.current"] == 2 * MiB
    assert s["segment.all.current"] == 1
    assert driver_used(rt) - before == 2 * MiB
    assert sorted(blocks) == [blocks[0] + 512 * i for i in range(1000)]   # carved in address order
    for b in blocks:
        rt.free(0, b)
    assert stats(rt)["allocated_bytes.all.current"] == 0


def test_small_blocks_split_and_coalesce(rt):
    a = rt.malloc(0, 1000)
    b = rt.malloc(0, 1000)
    assert b == a + 1024
    s = stats(rt)
    assert s["inactive_split.small_pool.current"] == 1
    assert s["inactive_split_bytes.all.current"] == 2 * MiB - 2048
    rt.free(0, a)                                   # a cannot merge: b is live
    s = stats(rt)
    assert s["inactive_split.all.current"] == 2
    assert s["inactive_split_bytes.all.current"] == 2 * MiB - 1024
    rt.free(0, b)                                   # b merges with a and the tail: one whole block
    s = stats(rt)
    assert s["inactive_split.all.current"] == 0 and s["inactive_split_bytes.all.current"] == 0
    (segment,) = rt.device(0).allocator.snapshot()
    assert segment["blocks"] == [{"address": a, "size": 2 * MiB, "requested_size": 0, "state": "inactive"}]


def test_best_fit_takes_the_smallest_free_block_that_fits(rt):
    a = rt.malloc(0, 8192)
    keep1 = rt.malloc(0, 512)
    c = rt.malloc(0, 4096)
    keep2 = rt.malloc(0, 512)
    rt.free(0, a)
    rt.free(0, c)
    assert rt.malloc(0, 4000) == c                  # 4096 fits exactly; the 8192 hole stays whole
    d = rt.malloc(0, 6000)                          # 6144 from the 8192 hole, 2048 split off
    assert d == a
    assert rt.malloc(0, 2048) == a + 6144
    s = stats(rt)
    assert s["num_device_alloc"] == 1               # everything came from the first segment
    assert s["num_cache_hits"] == 6
    for x in (keep1, keep2):
        rt.free(0, x)


def test_large_requests_split_a_20_mib_segment(rt):
    a = rt.malloc(0, 3 * MiB)
    b = rt.malloc(0, 5 * MiB)
    assert b == a + 3 * MiB
    s = stats(rt)
    assert s["reserved_bytes.large_pool.current"] == 20 * MiB and s["segment.large_pool.current"] == 1
    assert s["allocated_bytes.large_pool.current"] == 8 * MiB
    assert s["inactive_split_bytes.large_pool.current"] == 12 * MiB
    rest = rt.malloc(0, 11 * MiB + 1)               # best fit: 11 MiB + 512 of the 12 MiB left
    assert rest == a + 8 * MiB
    big = rt.malloc(0, 13 * MiB + 1)                # no room: its own segment, rounded to 2 MiB
    s = stats(rt)
    assert s["reserved_bytes.all.current"] == 34 * MiB and s["segment.all.current"] == 2
    assert s["allocated_bytes.all.current"] == 8 * MiB + 12 * MiB + 14 * MiB   # 1 MiB - 512 rest kept
    for x in (a, b, rest, big):
        rt.free(0, x)


def test_a_large_remainder_of_at_most_1_mib_is_not_split_off(rt):
    a = rt.malloc(0, 19 * MiB + MiB // 2)           # 20 MiB segment; a 0.5 MiB rest stays in the block
    s = stats(rt)
    assert s["allocated_bytes.all.current"] == 20 * MiB
    assert s["requested_bytes.all.current"] == 19 * MiB + MiB // 2
    assert s["inactive_split.all.current"] == 0
    rt.free(0, a)


def test_free_then_malloc_reuses_the_cached_block(rt):
    a = rt.malloc(0, 1000)
    used = driver_used(rt)
    rt.free(0, a)
    assert driver_used(rt) == used                  # freeing keeps the memory reserved
    assert rt.malloc(0, 1000) == a
    s = stats(rt)
    assert s["num_cache_hits"] == 1 and s["num_device_alloc"] == 1


def test_blocks_are_cached_per_stream(rt):
    other = rt.stream_create(0)
    a = rt.malloc(0, 1000, stream_id=other.stream_id)
    rt.free(0, a)
    b = rt.malloc(0, 1000)
    assert not (a <= b < a + 2 * MiB)               # stream 0 carves its own segment
    assert stats(rt)["segment.all.current"] == 2
    assert rt.malloc(0, 1000, stream_id=other.stream_id) == a


def test_current_and_peak_statistics(rt):
    a = rt.malloc(0, 1000)                          # 1024 in a 2 MiB small segment
    b = rt.malloc(0, 3 * MiB)                       # 3 MiB in a 20 MiB large segment
    s = stats(rt)
    assert s["allocated_bytes.all.current"] == 1024 + 3 * MiB
    assert s["reserved_bytes.all.current"] == 22 * MiB
    assert s["active.all.current"] == 2
    rt.free(0, b)
    s = stats(rt)
    assert s["allocated_bytes.all.current"] == 1024
    assert s["allocated_bytes.all.peak"] == 1024 + 3 * MiB
    assert s["reserved_bytes.all.current"] == 22 * MiB    # cached, still reserved
    assert s["allocation.all.allocated"] == 2 and s["allocation.all.freed"] == 1
    rt.device(0).allocator.reset_peak()
    s = stats(rt)
    assert s["allocated_bytes.all.peak"] == 1024
    assert s["reserved_bytes.all.peak"] == 22 * MiB
    rt.free(0, a)
    rt.empty_cache(0)
    rt.device(0).allocator.reset_peak()
    assert stats(rt)["reserved_bytes.all.peak"] == 0


def test_snapshot_lists_segments_and_blocks(rt):
    a = rt.malloc(0, 100)
    b = rt.malloc(0, 600)
    rt.free(0, a)
    (segment,) = rt.device(0).allocator.snapshot()
    assert segment == {
        "device": 0, "address": a, "total_size": 2 * MiB, "stream": 0, "segment_type": "small",
        "allocated_size": 1024, "active_size": 1024, "requested_size": 600,
        "blocks": [{"address": a, "size": 512, "requested_size": 0, "state": "inactive"},
                   {"address": a + 512, "size": 1024, "requested_size": 600, "state": "active_allocated"},
                   {"address": a + 1536, "size": 2 * MiB - 1536, "requested_size": 0, "state": "inactive"}]}
    assert b == a + 512


# -- stream-ordered frees ------------------------------------------------------

def _async_read(rt, address, n, stream):
    """Queues a device->host copy of n floats at ``address``; returns the host buffer."""
    host = np.zeros(n, np.float32)
    rt.memcpy(TensorRef(True, -1, host.ctypes.data, F32, (n,), (1,)),
              TensorRef(False, 0, address, F32, (n,), (1,)), stream)
    return host


def _filled_block(rt, n, value=3.0):
    a = rt.malloc(0, 4 * n)
    rt.memset(TensorRef(False, 0, a, F32, (n,), (1,)), value, rt.stream(0))
    return a


def test_empty_cache_waits_for_queued_work_that_reads_a_freed_block(rt):
    n = 1 << 20
    a = _filled_block(rt, n)
    host = _async_read(rt, a, n, rt.stream(0))      # queued, not run yet
    rt.free(0, a)
    rt.empty_cache(0)                               # must not unmap a under the queued copy
    assert stats(rt)["reserved_bytes.all.current"] == 0
    rt.stream(0).synchronize()                      # no page fault
    assert (host == 3.0).all()


def test_empty_cache_waits_for_queued_work_that_reads_a_small_block(rt):
    a = _filled_block(rt, 16, value=5.0)
    host = _async_read(rt, a, 16, rt.stream(0))
    rt.free(0, a)
    rt.empty_cache(0)
    rt.device_synchronize(0)
    assert (host == 5.0).all()


def test_out_of_memory_retry_waits_for_queued_work(rt):
    n = 10 << 20                                    # 40 MiB
    a = _filled_block(rt, n)
    host = _async_read(rt, a, n, rt.stream(0))
    rt.free(0, a)                                   # cached; the retry must give it back safely
    b = rt.malloc(0, 50 * MiB)
    assert stats(rt)["num_alloc_retries"] == 1
    rt.stream(0).synchronize()
    assert (host == 3.0).all()
    rt.free(0, b)


def test_out_of_memory_never_poisons_the_context(rt):
    n = 1 << 20
    a = _filled_block(rt, n)
    host = _async_read(rt, a, n, rt.stream(0))
    with pytest.raises(runtime.OutOfMemoryError):
        rt.malloc(0, 80 * MiB)
    rt.stream(0).synchronize()                      # the queued work and the context are fine
    assert (host == 3.0).all()
    assert rt.device(0).context.fault is None
    b = _filled_block(rt, 16, value=7.0)
    assert (_read_now(rt, b, 16) == 7.0).all()


def _read_now(rt, address, n):
    host = _async_read(rt, address, n, rt.stream(0))
    rt.stream(0).synchronize()
    return host


def test_freed_segment_is_reused_from_the_same_virtual_range(rt):
    a = rt.malloc(0, 40 * MiB)
    rt.free(0, a)
    rt.empty_cache(0)
    assert rt.malloc(0, 40 * MiB) == a             # the address space reuses freed ranges


def test_out_of_memory_names_the_numbers_and_recovers(rt):
    keep = rt.malloc(0, 40 * MiB)
    with pytest.raises(runtime.OutOfMemoryError) as info:
        rt.malloc(0, 40 * MiB)
    err = info.value
    free, total = rt.mem_get_info(0)
    assert err.code == runtime.ErrorCode.OUT_OF_MEMORY and err.scope == runtime.Scope.OPERATION
    assert (err.device, err.requested) == (0, 40 * MiB)
    assert err.allocated == 40 * MiB and err.reserved == 40 * MiB
    assert err.free == free == total - 40 * MiB
    message = str(err)
    for number in (40 * MiB, free, total):
        assert str(number) in message
    assert "allocated" in message and "reserved" in message and "free" in message
    assert stats(rt)["num_ooms"] == 1
    fits = rt.malloc(0, 16 * MiB)                   # an allocation that fits still works
    assert fits != keep
    assert stats(rt)["allocated_bytes.all.current"] == 56 * MiB


def test_oom_flushes_the_cache_and_retries(rt):
    a = rt.malloc(0, 40 * MiB)
    rt.free(0, a)                                   # 40 MiB cached, not usable for a 50 MiB request
    b = rt.malloc(0, 50 * MiB)                      # succeeds only after the cache is returned
    assert stats(rt)["reserved_bytes.all.current"] == 50 * MiB
    rt.free(0, b)


def test_retry_after_cache_flush_is_counted(rt):
    rt.free(0, rt.malloc(0, 40 * MiB))
    rt.malloc(0, 50 * MiB)
    assert stats(rt)["num_alloc_retries"] == 1


def test_empty_cache_returns_memory_to_the_driver(rt):
    blocks = [rt.malloc(0, 12 * MiB) for _ in range(3)]   # a 12 MiB segment each
    before = rt.mem_get_info(0)[0]
    for b in blocks:
        rt.free(0, b)
    assert rt.mem_get_info(0)[0] == before
    rt.empty_cache(0)
    assert rt.mem_get_info(0)[0] == before + 36 * MiB
    assert stats(rt)["reserved_bytes.all.current"] == 0
    c = rt.malloc(0, 12 * MiB)                      # a fresh driver allocation
    assert stats(rt)["num_device_alloc"] == 4
    assert stats(rt)["num_cache_hits"] == 0
    rt.free(0, c)


def test_empty_cache_keeps_segments_that_still_hold_live_blocks(rt):
    keep = rt.malloc(0, 1000)
    rt.free(0, rt.malloc(0, 1000))
    rt.empty_cache(0)
    assert stats(rt)["segment.all.current"] == 1
    rt.free(0, keep)
    rt.empty_cache(0)
    assert stats(rt)["segment.all.current"] == 0


def test_record_stream_defers_reuse_until_the_other_stream_passes(rt):
    side = rt.stream_create(0)
    n = 1 << 20
    data = np.ones(n, np.float32)
    a = rt.malloc(0, data.nbytes)
    # Long work on the side stream uses the block.
    rt.memcpy(TensorRef(False, 0, a, 8, (n,), (1,)), TensorRef(True, -1, data.ctypes.data, 8, (n,), (1,)), side)
    rt.record_stream(0, a, side.stream_id)
    rt.free(0, a)
    b = rt.malloc(0, data.nbytes)
    assert b != a                                   # the side stream may still be using a
    rt.free(0, b)
    side.synchronize()
    assert side.query()
    c = rt.malloc(0, data.nbytes)
    assert c == a                                   # reusable once the side stream passed the free
    assert stats(rt)["num_device_alloc"] == 1


def test_record_stream_on_the_allocating_stream_is_a_no_op(rt):
    a = rt.malloc(0, 1000)
    rt.record_stream(0, a, 0)
    rt.free(0, a)
    assert rt.malloc(0, 1000) == a


def test_empty_cache_waits_for_deferred_blocks(rt):
    side = rt.stream_create(0)
    a = rt.malloc(0, 4 * MiB)
    rt.launch("fill", (TensorRef(False, 0, a, 8, (MiB,), (1,)), 1.0), side)
    rt.record_stream(0, a, side.stream_id)
    before = rt.mem_get_info(0)[0]
    rt.free(0, a)
    rt.empty_cache(0)
    assert rt.mem_get_info(0)[0] == before + 20 * MiB   # the whole segment went back
    assert side.query()


@pytest.mark.parametrize("size", [-1, 1.5])
def test_bad_malloc_size_is_an_invalid_value(rt, size):
    with pytest.raises(runtime.InvalidValueError):
        rt.malloc(0, size)


def test_freeing_an_unknown_address_is_an_invalid_value(rt):
    a = rt.malloc(0, 64)
    rt.free(0, a)
    with pytest.raises(runtime.InvalidValueError):
        rt.free(0, a)


def test_segments_requested_bytes_and_lifetime_totals(rt):
    a = rt.malloc(0, 1000)
    b = rt.malloc(0, 3 * MiB)
    s = stats(rt)
    assert s["segment.all.current"] == 2 and s["segment.all.allocated"] == 2
    assert s["requested_bytes.all.current"] == 1000 + 3 * MiB
    assert s["allocation.all.current"] == s["active.all.current"] == 2
    rt.free(0, a)
    rt.free(0, b)
    s = stats(rt)
    assert s["allocated_bytes.all.allocated"] == s["allocated_bytes.all.freed"] == 1024 + 3 * MiB
    assert s["requested_bytes.all.current"] == 0
    assert s["segment.all.current"] == 2          # cached, still reserved
    rt.empty_cache(0)
    s = stats(rt)
    assert s["segment.all.current"] == 0 and s["segment.all.freed"] == 2 and s["num_device_free"] == 2
    assert s["segment.all.peak"] == 2 and s["allocation.all.peak"] == 2


def test_reset_accumulated_zeroes_counters_not_current_values(rt):
    keep = rt.malloc(0, 4096)
    rt.free(0, rt.malloc(0, 4096))
    allocator = rt.device(0).allocator
    allocator.reset_accumulated()
    s = stats(rt)
    assert s["allocation.all.allocated"] == s["allocation.all.freed"] == 0
    assert s["num_device_alloc"] == 0 and s["num_cache_hits"] == 0
    assert s["allocation.all.current"] == 1 and s["allocated_bytes.all.current"] == 4096
    rt.free(0, keep)
    assert stats(rt)["allocation.all.freed"] == 1


def test_the_unrolled_statistics_updates_equal_the_general_ones():
    """Stats.on_malloc and on_free (the hot path, unrolled) change every statistic exactly as
    increase and decrease do with the changes their docstrings name, peaks included."""
    from hypothesis import given, settings, strategies as st
    from runtime.allocator import (ACTIVE, ACTIVE_BYTES, ALLOCATED_BYTES, ALLOCATION, REQUESTED_BYTES,
                                   Stats)

    def fields(s):
        return s.current, s.peak, s.allocated, s.freed

    step = st.tuples(st.booleans(), st.sampled_from([1, 2]), st.integers(1, 1 << 30), st.integers(1, 1 << 30))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(step, max_size=12))
    def check(steps):
        fast, general = Stats(), Stats()
        for is_malloc, pool, size, nbytes in steps:
            if is_malloc:
                fast.on_malloc(pool, size, nbytes)
                general.increase(pool, ((ALLOCATION, 1), (ALLOCATED_BYTES, size), (ACTIVE, 1),
                                        (ACTIVE_BYTES, size), (REQUESTED_BYTES, nbytes)))
            else:
                fast.on_free(pool, size, nbytes)
                general.decrease(pool, ((ALLOCATION, 1), (ALLOCATED_BYTES, size), (REQUESTED_BYTES, nbytes)))
            assert fields(fast) == fields(general)
    check()
