"""Error scopes and recovery on a private runtime: operation, stream, context and device scope;
the one recovery entry point; outputs that skipped or faulted commands never wrote."""
import numpy as np
import pytest

import runtime
from runtime import ErrorCode, Scope

from driver import FirmwareRecordError
from fault_helpers import chain, chain_text, dev, download, host, upload

N = 256


def test_stream_scope_aborts_that_stream_only_and_is_sticky_until_reset(rt):
    s1, s2 = rt.stream_create(0), rt.stream_create(0)
    a = rt.malloc(0, 4 * N)
    b = rt.malloc(0, 4 * N)
    rt.inject_fault(0, "dma_error", address_range=(a, a + 4 * N))
    values = np.arange(N, dtype=np.float32)
    rt.memcpy(dev(0, a, N), host(values), s1)           # hits the fault
    rt.launch("fill", (dev(0, a, N), 5.0), s1)           # queued behind it: aborted
    rt.memcpy(dev(0, b, N), host(values), s2)            # another stream: runs
    rt.launch("binary", ("add", dev(0, b, N), dev(0, b, N), dev(0, b, N), 8, 1.0), s2)
    s2.synchronize()
    assert (download(rt, 0, b, N, s2) == 2 * values).all()
    with pytest.raises(runtime.StreamFaultError) as info:
        s1.synchronize()
    err = info.value
    assert err.scope == Scope.STREAM and err.code == ErrorCode.DMA_ERROR
    assert "hardware event dma_error on device 0" in chain_text(err)
    with pytest.raises(runtime.StreamFaultError) as again:  # sticky for the stream
        s1.synchronize()
    assert str(again.value) == str(err)
    s3 = rt.stream_create(0)                             # the context is fine
    assert (download(rt, 0, b, N, s3) == 2 * values).all()
    rt.reset_device(0, "test")
    rt.memcpy(dev(0, a, N), host(values), s1, blocking=True)   # the stream runs again
    assert (download(rt, 0, a, N, s1) == values).all()


def test_output_of_an_aborted_command_raises_when_read_naming_the_fault(rt):
    s1, s2 = rt.stream_create(0), rt.stream_create(0)
    a = upload(rt, 0, np.ones(N))
    out = rt.malloc(0, 4 * N)
    rt.inject_fault(0, "ring_corruption", address_range=(out, out + 4 * N))
    rt.launch("binary", ("add", dev(0, out, N), dev(0, a, N), dev(0, a, N), 8, 1.0), s1)
    with pytest.raises(runtime.StreamFaultError):
        s1.synchronize()
    with pytest.raises(runtime.PoisonedDataError) as info:   # read on another stream
        download(rt, 0, out, N, s2)
    text = chain_text(info.value)
    assert "holds no valid data" in text and "hardware event ring_corruption on device 0" in text
    assert type(chain(info.value)[1]).__name__ == "FirmwareRecordError"  # the cause holds the firmware record
    with pytest.raises(runtime.PoisonedDataError):            # as an input of a kernel, too
        rt.launch("binary", ("add", dev(0, a, N), dev(0, out, N), dev(0, a, N), 8, 1.0), s2)
    assert (download(rt, 0, a, N, s2) == 1).all()             # the input is not poisoned
    rt.reset_device(0, "test")
    with pytest.raises(runtime.PoisonedDataError):            # still: never stale data
        download(rt, 0, out, N, s2)
    rt.free(0, out)                                           # the data goes with the allocation
    again = rt.malloc(0, 4 * N)
    rt.launch("fill", (dev(0, again, N), 3.0), s2)
    assert (download(rt, 0, again, N, s2) == 3).all()


def test_context_fault_is_sticky_and_a_second_context_is_unaffected(rt):
    stream = rt.stream(0)
    a = upload(rt, 0, np.arange(N))
    rt.inject_fault(0, "page_fault", engine="vector", after_commands=0)
    rt.launch("fill", (dev(0, a, N), 1.0), stream)
    with pytest.raises(runtime.DeviceFaultError) as first:
        stream.synchronize()
    err = first.value
    assert err.scope == Scope.CONTEXT and err.code == ErrorCode.ILLEGAL_ADDRESS
    for call in (lambda: stream.synchronize(), lambda: rt.launch("fill", (dev(0, a, N), 2.0), stream),
                 lambda: rt.malloc(0, 64), lambda: rt.stream_create(0),
                 lambda: rt.memcpy(dev(0, a, N), host(np.ones(N, np.float32)), stream)):
        with pytest.raises(runtime.DeviceFaultError) as again:
            call()
        assert str(again.value) == str(err) and again.value.__cause__ is err.__cause__
    # a second context on the same device (opened at the driver level) keeps working
    drv = rt.driver
    other = drv.open_context(0)
    queue = drv.create_queue(other)
    va = drv.allocate(other, 4 * N)
    result = np.zeros(N, np.float32)
    drv.submit_fill(queue, dev(0, va, N), 7.0)
    drv.submit_copy(queue, host(result), dev(0, va, N))
    sem = drv.new_semaphore(0)
    base = drv.semaphore_value(0, sem)
    drv.submit_signal(queue, sem, base + 1)
    drv.wait_semaphore(0, sem, base + 1)
    drv.check_context(other)
    assert (result == 7).all()
    # and so does the other device
    b = upload(rt, 1, np.arange(N))
    assert (download(rt, 1, b, N) == np.arange(N)).all()
    # a context faulted at the driver level stays faulted until it is destroyed
    drv.submit_fill(queue, dev(0, va + (8 << 20), N), 1.0)   # outside its mappings
    drv.submit_signal(queue, sem, base + 2)
    drv.wait_semaphore(0, sem, base + 2)
    with pytest.raises(FirmwareRecordError) as sticky:
        drv.check_context(other)
    assert "page_fault" in str(sticky.value)
    drv.close_context(other)
    fresh = drv.open_context(0)
    drv.check_context(fresh)


def test_device_scope_needs_reset_then_the_page_is_retired_and_the_device_usable(rt):
    stream = rt.stream(0)
    a = upload(rt, 0, np.arange(N))
    free_before, total = rt.mem_get_info(0)
    rt.inject_fault(0, "ecc_uncorrectable", address_range=(a, a + 4 * N))
    rt.launch("binary", ("add", dev(0, a, N), dev(0, a, N), dev(0, a, N), 8, 1.0), stream)
    with pytest.raises(runtime.DeviceNeedsResetError) as info:
        stream.synchronize()
    assert info.value.scope == Scope.DEVICE and info.value.code == ErrorCode.ECC_UNCORRECTABLE
    health = rt.health(0)
    assert health["needs_reset"] and health["ecc_uncorrected"] == 1
    with pytest.raises(runtime.DeviceNeedsResetError):   # every call on the device
        rt.malloc(0, 64)
    b = upload(rt, 1, np.ones(N))                          # the other device is fine
    assert (download(rt, 1, b, N) == 1).all()
    dump = rt.reset_device(0, "ecc")
    assert dump["device_fault"]["status"].name == "ECC_UNCORRECTABLE"
    second = rt.reset_device(0, "again")                   # safe to call twice
    assert second["device_fault"] is None and second["faults"] == []
    health = rt.health(0)
    assert health["retired_pages"] == 1 and health["resets"] == 2 and not health["needs_reset"]
    with pytest.raises(runtime.PoisonedDataError, match="reset after a device-scope fault"):
        download(rt, 0, a, N)                              # lived on the device: invalid now
    rt.free(0, a)
    rt.empty_cache(0)
    free_after, _ = rt.mem_get_info(0)
    page = rt.config.device.mmu.page_size_bytes
    assert free_before < total and free_after == total - page  # everything back but the retired page
    c = upload(rt, 0, np.full(N, 4.0))
    assert (download(rt, 0, c, N) == 4).all()


def test_reset_completes_every_pending_fence_and_nothing_waits_forever(rt):
    s1, s2 = rt.stream_create(0), rt.stream_create(0)
    drv = rt.driver
    e1, e2 = drv.new_semaphore(0), drv.new_semaphore(0)
    v1, v2 = drv.semaphore_value(0, e1) + 1, drv.semaphore_value(0, e2) + 1
    drv.submit_wait(s1.queue, 0, e2, v2)   # a cyclic wait: s1 waits for s2, s2 for s1
    drv.submit_signal(s1.queue, e1, v1)
    drv.submit_wait(s2.queue, 0, e1, v1)
    drv.submit_signal(s2.queue, e2, v2)
    s1.dirty = s2.dirty = True
    mark1, mark2 = s1.record_mark(), s2.record_mark()
    with pytest.raises(runtime.StreamError, match="can never"):
        s1.synchronize()
    rt.reset_device(0, "cyclic wait")
    assert s1.mark_passed(mark1) and s2.mark_passed(mark2)   # every pending fence completed
    a = upload(rt, 0, np.ones(N), s1)
    assert (download(rt, 0, a, N, s2) == 1).all()


def test_launch_blocking_raises_at_the_faulting_op():
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny", launch_blocking=True))
    a = upload(rt, 0, np.ones(N))
    rt.inject_fault(0, "page_fault", engine="vector", after_commands=0)
    with pytest.raises(runtime.DeviceFaultError, match="raised at the faulting op under EMU_LAUNCH_BLOCKING=1"):
        rt.launch("fill", (dev(0, a, N), 1.0), rt.stream(0))


def test_asynchronous_report_says_so_at_the_next_synchronising_call(rt):
    a = upload(rt, 0, np.ones(N))
    rt.inject_fault(0, "page_fault", engine="vector", after_commands=0)
    seq = rt.launch("fill", (dev(0, a, N), 1.0), rt.stream(0))   # returns: launches are asynchronous
    with pytest.raises(runtime.DeviceFaultError) as info:
        rt.stream(0).synchronize()
    assert f"reported asynchronously: the faulting command, correlation id {seq}" in str(info.value)


def test_operation_scope_bad_request_changes_nothing(rt):
    a = upload(rt, 0, np.ones(N))
    with pytest.raises(runtime.InvalidValueError, match="valid kinds"):
        rt.inject_fault(0, "solar_flare")
    with pytest.raises(runtime.InvalidValueError, match="unknown trigger"):
        rt.inject_fault(0, "dma_error", afterwards=3)
    assert rt.health(0)["faults_armed"] == []
    assert (download(rt, 0, a, N) == 1).all()


def test_cancel_and_clear_disarm(rt):
    a = upload(rt, 0, np.ones(N))
    handle = rt.inject_fault(0, "page_fault")
    assert rt.cancel_fault(0, handle) and not rt.cancel_fault(0, handle)
    rt.inject_fault(0, "dma_error", persistent=True)
    rt.inject_fault(0, "thermal_throttle")
    rt.clear_faults()
    assert rt.health(0)["faults_armed"] == []
    assert (download(rt, 0, a, N) == 1).all()
    assert not rt.health(0)["throttled"]


def test_error_log_keeps_every_record_and_the_first_in_full(rt):
    a = upload(rt, 0, np.ones(N))
    rt.inject_fault(0, "dma_error", engine="dma", after_commands=0)
    with pytest.raises(runtime.StreamFaultError):
        download(rt, 0, a, N)
    rt.reset_device(0, "test")
    rt.inject_fault(0, "page_fault", engine="vector", after_commands=0)
    rt.launch("fill", (dev(0, a, N), 1.0), rt.stream(0))
    with pytest.raises(runtime.DeviceFaultError):
        rt.stream(0).synchronize()
    log = rt.error_log(0)
    kinds = [e["kind"] for e in log["errors"]]
    assert kinds == ["dma_error", "page_fault"]
    first = log["errors"][0]
    assert first["scope"] == "stream" and first["unit"] == "dma" and first["correlation_id"] > 0
    assert "hardware event dma_error on device 0" in first["message"]
    assert [e["kind"] for e in log["events"]] == ["dma_error", "page_fault"]
