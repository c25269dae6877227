"""Caching allocator (runtime/allocator.py) through the runtime."""
import numpy as np
import pytest

import runtime
from runtime import TensorRef
from runtime.allocator import LARGE_ROUND, SMALL_ROUND, rounded_size

MiB = 1 << 20


def stats(rt, device=0):
    return rt.device(device).allocator.stats()


def test_rounded_sizes():
    assert rounded_size(1) == SMALL_ROUND == 512
    assert rounded_size(513) == 1024
    assert rounded_size(MiB - 1) == MiB
    assert rounded_size(MiB) == LARGE_ROUND
    assert rounded_size(MiB + 1) == LARGE_ROUND
    assert rounded_size(3 * MiB) == 4 * MiB


def test_free_then_malloc_reuses_the_cached_block(rt):
    a = rt.malloc(0, 1000)
    drv_free = rt.mem_get_info(0)[0]
    rt.free(0, a)
    assert rt.mem_get_info(0)[0] == drv_free        # freeing keeps the memory reserved
    b = rt.malloc(0, 1000)
    assert b == a
    s = stats(rt)
    assert s["num_cache_hits"] == 1
    assert s["num_device_alloc"] == 1               # no second driver allocation
    assert rt.mem_get_info(0)[0] == drv_free


def test_different_size_class_is_not_reused(rt):
    a = rt.malloc(0, 1000)
    rt.free(0, a)
    b = rt.malloc(0, 5000)
    assert b != a
    assert stats(rt)["num_cache_hits"] == 0
    assert stats(rt)["num_device_alloc"] == 2


def test_blocks_are_cached_per_stream(rt):
    other = rt.stream_create(0)
    a = rt.malloc(0, 1000, stream_id=other.stream_id)
    rt.free(0, a)
    assert rt.malloc(0, 1000) != a                  # stream 0 does not take stream 1's block
    assert rt.malloc(0, 1000, stream_id=other.stream_id) == a


def test_current_and_peak_statistics(rt):
    a = rt.malloc(0, 1000)                          # 1024 after rounding
    b = rt.malloc(0, 3 * MiB)                       # 4 MiB after rounding
    s = stats(rt)
    assert s["allocated_bytes.all.current"] == 1024 + 4 * MiB
    assert s["reserved_bytes.all.current"] == 1024 + 4 * MiB
    assert s["active.all.current"] == 2
    rt.free(0, b)
    s = stats(rt)
    assert s["allocated_bytes.all.current"] == 1024
    assert s["allocated_bytes.all.peak"] == 1024 + 4 * MiB
    assert s["reserved_bytes.all.current"] == 1024 + 4 * MiB   # cached, still reserved
    assert s["allocation.all.allocated"] == 2 and s["allocation.all.freed"] == 1
    rt.device(0).allocator.reset_peak()
    s = stats(rt)
    assert s["allocated_bytes.all.peak"] == 1024
    assert s["reserved_bytes.all.peak"] == 1024 + 4 * MiB
    rt.free(0, a)
    rt.empty_cache(0)
    rt.device(0).allocator.reset_peak()
    assert stats(rt)["reserved_bytes.all.peak"] == 0


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
    blocks = [rt.malloc(0, 4 * MiB) for _ in range(3)]
    before = rt.mem_get_info(0)[0]
    for b in blocks:
        rt.free(0, b)
    assert rt.mem_get_info(0)[0] == before
    rt.empty_cache(0)
    assert rt.mem_get_info(0)[0] == before + 12 * MiB
    assert stats(rt)["reserved_bytes.all.current"] == 0
    c = rt.malloc(0, 4 * MiB)                       # a fresh driver allocation
    assert stats(rt)["num_device_alloc"] == 4
    assert stats(rt)["num_cache_hits"] == 0
    rt.free(0, c)


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
    assert stats(rt)["num_cache_hits"] == 1


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
    assert rt.mem_get_info(0)[0] == before + 4 * MiB
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
    assert s["allocated_bytes.all.allocated"] == s["allocated_bytes.all.freed"] == 1024 + 4 * MiB
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
