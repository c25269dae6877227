"""The submission hot path's bookkeeping stays bounded: LRU caches, recycled fence semaphores, a
command trace that is bounded and can be switched off."""
import numpy as np
import pytest

import driver.driver as driver_module
import runtime
from firmware.lru import LRUCache
from runtime import TensorRef

F32 = 8


def test_lru_cache_evicts_the_least_recently_used():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1          # a is now the most recently used
    cache.put("c", 3)                   # evicts b, not a
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2 and cache.evictions == 1
    with pytest.raises(ValueError):
        LRUCache(0)


def _launch_adds(rt, addresses, n=4):
    for address in addresses:
        ref = TensorRef(False, 0, address, F32, (n,), (1,))
        rt.launch("binary", ("add", ref, ref, ref, F32, 1.0), rt.stream(0))


def test_descriptor_and_decode_caches_are_bounded_lru(monkeypatch):
    monkeypatch.setattr(driver_module, "DESCRIPTOR_CACHE_ENTRIES", 8)
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    base = rt.malloc(0, 4096)
    hot = [base]
    _launch_adds(rt, hot)
    for i in range(1, 40):               # 39 other operands, re-using the hot one in between
        _launch_adds(rt, [base + 64 * i])
        _launch_adds(rt, hot)
    rt.device_synchronize(0)
    cache = rt.device(0).context.descriptors
    assert len(cache) == 8 and cache.evictions == 32
    hot_ref = TensorRef(False, 0, base, F32, (4,), (1,))
    assert hot_ref in cache              # a clear-when-full cache would have dropped it
    firmware = rt.driver.transport.devices[0].firmware
    assert len(firmware._launches) <= firmware._launches.capacity
    assert len(firmware._resolved) <= firmware._resolved.capacity


def test_event_semaphores_are_recycled_and_stay_correct():
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    stream = rt.stream(0)
    semaphores = set()
    for _ in range(300):
        event = rt.event_create(0, enable_timing=True)
        rt.event_record(event, stream)
        semaphores.add(event.semaphore)
        rt.event_destroy(event)
    rt.device_synchronize(0)
    for _ in range(300):
        event = rt.event_create(0)
        semaphores.add(event.semaphore)
        rt.event_destroy(event)
    assert len(semaphores) <= 80         # 600 events; ids come back once their record executed
    # A recycled semaphore does not start at 0: records, queries, waits and timing still work.
    start, end = rt.event_create(0, enable_timing=True), rt.event_create(0, enable_timing=True)
    assert not start.recorded and rt.event_query(start)
    host = np.ones(1 << 16, np.float32)
    a = rt.malloc(0, host.nbytes)
    rt.event_record(start, stream)
    rt.memcpy(TensorRef(False, 0, a, F32, host.shape, (1,)), TensorRef(True, -1, host.ctypes.data, F32, host.shape, (1,)),
              stream)
    rt.event_record(end, stream)
    rt.event_synchronize(end)
    assert rt.event_query(end) and rt.event_elapsed_ms(start, end) > 0


def test_a_semaphore_is_not_recycled_before_its_last_record_executed():
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    event = rt.event_create(0)
    rt.event_record(event, rt.stream(0))     # queued, not executed
    old = event.semaphore
    rt.event_destroy(event)
    assert rt.event_create(0).semaphore != old
    rt.device_synchronize(0)
    rt.driver._collect_semaphores(0)
    assert rt.event_create(0).semaphore == old


def test_stream_on_a_recycled_semaphore_marks_from_its_value():
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    for _ in range(3):
        e = rt.event_create(0)
        rt.event_record(e, rt.stream(0))
        rt.event_record(e, rt.stream(0))
        rt.event_destroy(e)
    rt.device_synchronize(0)
    rt.driver._collect_semaphores(0)
    side = rt.stream_create(0)           # takes a recycled semaphore already at value 2
    assert side._base == 2
    side.synchronize()
    assert side.query()


@pytest.mark.parametrize("entries", [0, 5])
def test_command_trace_is_bounded_and_can_be_switched_off(entries):
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny", trace_entries=entries))
    a = rt.malloc(0, 4096)
    _launch_adds(rt, [a] * 12)
    rt.device_synchronize(0)
    telemetry = rt.telemetry(0)
    assert len(telemetry["trace"]) == entries
    assert telemetry["kernel_stats"]["binary.add"].count == 12   # statistics are kept either way
    rt.set_trace_entries(3)
    _launch_adds(rt, [a] * 4)
    rt.device_synchronize(0)
    assert len(rt.telemetry(0)["trace"]) == 3


def test_trace_entries_setting_is_validated():
    assert runtime.Settings.from_environment({"EMU_TRACE_ENTRIES": "0"}).trace_entries == 0
    with pytest.raises(runtime.InvalidValueError, match="EMU_TRACE_ENTRIES"):
        runtime.Settings.from_environment({"EMU_TRACE_ENTRIES": "-3"})


def test_launches_that_differ_only_in_a_zero_are_decoded_apart():
    # 0 == 0.0 == -0.0 == False: the decode cache keys such launches by each zero's type and sign,
    # so a repeated launch with a zero argument is cached and a different zero is not mistaken
    # for it (a fill of -0.0 after one of +0.0 writes -0.0).
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    n = 8
    a = rt.malloc(0, 4 * n)
    ref = TensorRef(False, 0, a, F32, (n,), (1,))
    host = np.full(n, 5.0, np.float32)
    href = TensorRef(True, -1, host.ctypes.data, F32, (n,), (1,))
    firmware = rt.driver.transport.devices[0].firmware
    for value, sign in ((0.0, 1.0), (-0.0, -1.0), (0.0, 1.0), (-0.0, -1.0), (0, 1.0), (False, 1.0)):
        rt.launch("fill", (ref, value), rt.stream(0))
        rt.memcpy(href, ref, rt.stream(0), blocking=True)
        assert np.all(host == 0) and np.all(np.copysign(1.0, host) == sign), (value, host)
    before = len(firmware._launches)
    rt.launch("fill", (ref, -0.0), rt.stream(0))          # seen before: a cache hit, no new entry
    rt.device_synchronize(0)
    assert len(firmware._launches) == before
