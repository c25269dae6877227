"""The user-mode runtime (runtime/runtime.py): copies, fills, launches, streams, events, errors, clock."""
import numpy as np
import pytest

import runtime
from driver import DriverStatus, FirmwareRecordError
from emulator.kernels import dtypes
from firmware import FirmwareImage, abi
from runtime import ErrorCode, Scope, TensorRef

F32 = dtypes.FLOAT32
MiB = 1 << 20


def host(arr, dtype=F32):
    return TensorRef(True, -1, arr.ctypes.data, dtype, arr.shape, tuple(s // arr.itemsize for s in arr.strides))


def dev(device, address, shape, strides=None, dtype=F32):
    shape = tuple(shape)
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    return TensorRef(False, device, address, dtype, shape, tuple(strides))


def upload(rt, arr, device=0, stream=None):
    address = rt.malloc(device, arr.nbytes)
    rt.memcpy(dev(device, address, arr.shape), host(arr), stream or rt.stream(device))
    return address


def download(rt, address, shape, device=0, stream=None, dtype=np.float32):
    out = np.zeros(shape, dtype)
    rt.memcpy(host(out), dev(device, address, shape), stream or rt.stream(device), blocking=True)
    return out


def bad_ref(rt, shape=(16,)):
    """A device reference into the guard page right after a real segment (a small block lives in
    a 2 MiB segment; the driver leaves an unmapped guard page after each segment)."""
    address = rt.malloc(0, 4096)
    (segment,) = [s for s in rt.memory_snapshot(0) if s["address"] <= address < s["address"] + s["total_size"]]
    return dev(0, segment["address"] + segment["total_size"] + 4096, shape)


# -- copies -------------------------------------------------------------------

def test_h2d_d2h_round_trip(rt):
    src = np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32)
    address = upload(rt, src)
    assert np.array_equal(download(rt, address, src.shape), src)


def test_memcpy_is_asynchronous_until_synchronize(rt):
    src = np.arange(1024, dtype=np.float32)
    address = upload(rt, src)
    out = np.zeros_like(src)
    rt.memcpy(host(out), dev(0, address, src.shape), rt.stream(0))
    assert not out.any()
    rt.stream(0).synchronize()
    assert np.array_equal(out, src)


def test_d2d_copy(rt):
    src = np.arange(300, dtype=np.float32)
    a = upload(rt, src)
    b = rt.malloc(0, src.nbytes)
    rt.memcpy(dev(0, b, src.shape), dev(0, a, src.shape), rt.stream(0))
    assert np.array_equal(download(rt, b, src.shape), src)
    assert "memcpy_d2d" in rt.telemetry(0)["kernel_stats"]


def test_peer_copy_device0_to_device1(rt):
    src = np.arange(4096, dtype=np.float32) * 3
    a = upload(rt, src, device=0)
    b = rt.malloc(1, src.nbytes)
    rt.memcpy(dev(1, b, src.shape), dev(0, a, src.shape), rt.stream(0))   # issued on device 0's stream
    # Device 1's own stream is ordered after the copy: no explicit synchronisation needed.
    assert np.array_equal(download(rt, b, src.shape, device=1), src)
    assert rt.telemetry(0)["kernel_stats"]["memcpy_p2p"].count == 1


def test_strided_copies(rt):
    m = np.arange(64, dtype=np.float32).reshape(8, 8)
    column = m[:, 3]                                   # strided host source
    address = rt.malloc(0, 16 * 4)
    rt.memset(dev(0, address, (16,)), -1.0, rt.stream(0))
    rt.memcpy(dev(0, address, (8,), strides=(2,)), host(column), rt.stream(0))   # strided device dest
    got = download(rt, address, (16,))
    assert np.array_equal(got[0::2], column)
    assert (got[1::2] == -1).all()
    # Strided device source into a transposed host view.
    square = upload(rt, m)
    out = np.zeros((8, 8), np.float32)
    rt.memcpy(host(out.T), dev(0, square, (8, 8)), rt.stream(0), blocking=True)
    assert np.array_equal(out, m.T)


def test_memset(rt):
    address = rt.malloc(0, 1000 * 4)
    rt.memset(dev(0, address, (1000,)), 7.25, rt.stream(0))
    assert (download(rt, address, (1000,)) == 7.25).all()
    ints = rt.malloc(0, 10 * 4)
    rt.memset(dev(0, ints, (10,), dtype=dtypes.INT32), -3, rt.stream(0))
    assert (download(rt, ints, (10,), dtype=np.int32) == -3).all()


def test_launch_binary_add(rt):
    a = np.arange(500, dtype=np.float32)
    b = np.linspace(0, 1, 500, dtype=np.float32)
    da, db = upload(rt, a), upload(rt, b)
    dc = rt.malloc(0, a.nbytes)
    rt.launch("binary", ("add", dev(0, dc, a.shape), dev(0, da, a.shape), dev(0, db, a.shape), F32, 1), rt.stream(0))
    assert np.array_equal(download(rt, dc, a.shape), a + b)
    assert rt.telemetry(0)["kernel_stats"]["binary.add"].count == 1


def test_invalid_copy_is_an_operation_error_and_not_sticky(rt):
    address = rt.malloc(0, 64)
    with pytest.raises(runtime.InvalidValueError) as info:
        rt.memcpy(dev(0, address, (4,)), host(np.zeros(5, np.float32)), rt.stream(0))
    assert info.value.code == ErrorCode.INVALID_VALUE and info.value.scope == Scope.OPERATION
    assert info.value.__cause__.status == DriverStatus.INVALID_ARGUMENT
    rt.stream(0).synchronize()                         # nothing poisoned


def test_invalid_device(rt):
    with pytest.raises(runtime.InvalidDeviceError) as info:
        rt.malloc(5, 16)
    assert info.value.code == ErrorCode.INVALID_DEVICE
    assert "2 emu devices" in str(info.value) and "0..1" in str(info.value)


# -- streams and events -----------------------------------------------------------

def test_cross_stream_wait_and_elapsed_time(rt):
    sa, sb = rt.stream_create(0), rt.stream_create(0)
    big = np.random.default_rng(0).standard_normal(1 << 18).astype(np.float32)     # 1 MiB
    a, b = rt.malloc(0, big.nbytes), rt.malloc(0, big.nbytes)
    start, done = rt.event_create(0, enable_timing=True), rt.event_create(0, enable_timing=True)
    rt.event_record(start, sa)
    rt.memcpy(dev(0, a, big.shape), host(big), sa)
    rt.event_record(done, sa)
    rt.stream_wait_event(sb, done)
    rt.memcpy(dev(0, b, big.shape), dev(0, a, big.shape), sb)
    out = np.zeros_like(big)
    rt.memcpy(host(out), dev(0, b, big.shape), sb)
    rt.stream_synchronize(sb)
    assert np.array_equal(out, big)
    ms = rt.event_elapsed_ms(start, done)
    # At least the 1 MiB over the 32 GB/s host link.
    assert ms > big.nbytes / rt.config.host_link.bandwidth_gb_per_s / 1e6
    trace = {e.name: e for e in rt.telemetry(0)["trace"]}
    assert trace["memcpy_d2d"].start_ns >= trace["memcpy_h2d"].end_ns


def test_stream_query(rt):
    s = rt.stream_create(0)
    big = np.ones(1 << 20, np.float32)                 # 4 MiB: ~130 us on the link, far beyond host time
    rt.memcpy(dev(0, rt.malloc(0, big.nbytes), big.shape), host(big), s)
    assert s.query() is False
    s.synchronize()
    assert s.query() is True


# query() charges host time, so a polling loop sees the device progress.


def test_polling_stream_query_terminates(rt):
    s = rt.stream_create(0)
    big = np.ones(1 << 20, np.float32)
    rt.memcpy(dev(0, rt.malloc(0, big.nbytes), big.shape), host(big), s)
    polls = 0
    while not s.query():
        polls += 1
        assert polls < 100_000, "stream.query() never turned True"


def test_polling_event_query_terminates(rt):
    s = rt.stream(0)
    big = np.ones(1 << 20, np.float32)
    rt.memcpy(dev(0, rt.malloc(0, big.nbytes), big.shape), host(big), s)
    event = rt.event_create(0)
    rt.event_record(event, s)
    polls = 0
    while not rt.event_query(event):
        polls += 1
        assert polls < 100_000, "event_query() never turned True"


def test_new_stream_is_idle(rt):
    assert rt.stream_create(0).query() is True


def test_event_query_and_synchronize(rt):
    s = rt.stream(0)
    event = rt.event_create(0)
    assert rt.event_query(event) is True               # never recorded
    big = np.ones(1 << 20, np.float32)
    rt.memcpy(dev(0, rt.malloc(0, big.nbytes), big.shape), host(big), s)
    rt.event_record(event, s)
    assert rt.event_query(event) is False
    rt.event_synchronize(event)
    assert rt.event_query(event) is True


def test_elapsed_time_needs_timing_events(rt):
    a, b = rt.event_create(0), rt.event_create(0)
    rt.event_record(a, rt.stream(0))
    rt.event_record(b, rt.stream(0))
    with pytest.raises(runtime.InvalidValueError):
        rt.event_elapsed_ms(a, b)


def test_unknown_stream(rt):
    with pytest.raises(runtime.InvalidValueError, match="no stream 9"):
        rt.stream(0, 9)


# -- device faults ----------------------------------------------------------------

def test_fault_surfaces_at_synchronize_without_launch_blocking(rt):
    src = np.ones(16, np.float32)
    rt.memcpy(bad_ref(rt), host(src), rt.stream(0))    # returns: the fault has not happened yet
    with pytest.raises(runtime.DeviceFaultError) as info:
        rt.stream(0).synchronize()
    assert info.value.code == ErrorCode.ILLEGAL_ADDRESS


def test_launch_blocking_raises_at_the_faulting_call(rt_blocking):
    rt = rt_blocking
    assert rt.launch_blocking
    src = np.ones(16, np.float32)
    with pytest.raises(runtime.DeviceFaultError) as info:
        rt.memcpy(bad_ref(rt), host(src), rt.stream(0))
    assert info.value.code == ErrorCode.ILLEGAL_ADDRESS


def test_launch_blocking_from_the_environment():
    assert runtime.Settings.from_environment({"EMU_LAUNCH_BLOCKING": "1"}).launch_blocking
    assert runtime.Settings.from_environment({"EMU_LAUNCH_BLOCKING": "yes"}).launch_blocking
    assert not runtime.Settings.from_environment({"EMU_LAUNCH_BLOCKING": "0"}).launch_blocking
    assert not runtime.Settings.from_environment({}).launch_blocking


def test_settings_from_the_environment():
    s = runtime.Settings.from_environment({"EMU_PRESET": "tiny", "EMU_CONFIG": "/x/chip.toml"})
    assert (s.preset, s.config_path) == ("tiny", "/x/chip.toml")
    assert runtime.Settings.from_environment({}).preset == "default"


def test_runtime_reads_the_environment_when_given_no_settings(monkeypatch):
    monkeypatch.setenv("EMU_PRESET", "tiny")
    monkeypatch.delenv("EMU_CONFIG", raising=False)
    monkeypatch.delenv("EMU_LAUNCH_BLOCKING", raising=False)
    rt = runtime.Runtime()
    assert rt.config.name == "tiny"
    assert rt.device_count == 2


def test_sticky_context_error_until_recover(rt):
    stream = rt.stream(0)
    good = rt.malloc(0, 64)
    src = np.ones(16, np.float32)
    rt.memcpy(bad_ref(rt), host(src), stream)
    with pytest.raises(runtime.DeviceFaultError) as first:
        stream.synchronize()
    err = first.value
    assert err.code == ErrorCode.ILLEGAL_ADDRESS and err.scope == Scope.CONTEXT
    cause = err.__cause__
    assert isinstance(cause, FirmwareRecordError)
    assert isinstance(cause.record, abi.ErrorRecord)
    assert cause.record.status == abi.Status.PAGE_FAULT and cause.record.unit == "dma"

    later_calls = [
        lambda: stream.synchronize(),
        lambda: rt.device_synchronize(0),
        lambda: rt.memcpy(dev(0, good, (16,)), host(src), stream),
        lambda: rt.memset(dev(0, good, (16,)), 0.0, stream),
        lambda: rt.launch("fill", (dev(0, good, (16,)), 1.0), stream),
    ]
    for call in later_calls:
        with pytest.raises(runtime.DeviceFaultError) as again:
            call()
        assert again.value.code == ErrorCode.ILLEGAL_ADDRESS
        assert again.value.scope == Scope.CONTEXT
        assert str(again.value) == str(err)
        assert again.value.__cause__ is cause

    dump = rt.recover(0, "test")
    assert dump["faults"][0]["address"] == cause.record.address
    rt.memcpy(dev(0, good, (16,)), host(src), stream)
    assert (download(rt, good, (16,)) == 1).all()


@pytest.mark.parametrize("call", ["malloc", "stream_create", "event_record"])
def test_sticky_error_is_raised_by_every_call(rt, call):
    rt.memcpy(bad_ref(rt), host(np.ones(16, np.float32)), rt.stream(0))
    with pytest.raises(runtime.DeviceFaultError):
        rt.stream(0).synchronize()
    calls = {
        "malloc": lambda: rt.malloc(0, 64),
        "stream_create": lambda: rt.stream_create(0),
        "event_record": lambda: rt.event_record(rt.event_create(0), rt.stream(0)),
    }
    with pytest.raises(runtime.DeviceFaultError):
        calls[call]()


def test_fault_on_device0_does_not_affect_device1(rt):
    rt.memcpy(bad_ref(rt), host(np.ones(16, np.float32)), rt.stream(0))
    with pytest.raises(runtime.DeviceFaultError):
        rt.stream(0).synchronize()
    src = np.arange(8, dtype=np.float32)
    assert np.array_equal(download(rt, upload(rt, src, device=1), src.shape, device=1), src)


def test_a_rejected_kernel_argument_is_operation_scope_reported_once(rt):
    """Formerly a sticky KERNEL_FAULT of the context (every later call failed until a reset; issue
    18): a command the device rejects is cudaErrorInvalidValue's class, operation scope."""
    address = rt.malloc(0, 64)
    ref = dev(0, address, (4,))
    seq = rt.launch("binary", ("frobnicate", ref, ref, ref, F32, 1), rt.stream(0))
    with pytest.raises(runtime.CommandRejectedError) as info:
        rt.stream(0).synchronize()
    err = info.value
    assert err.code == ErrorCode.INVALID_VALUE and err.scope == runtime.Scope.OPERATION
    assert err.__cause__.record.status == abi.Status.INVALID_ARGUMENT and err.__cause__.seq == seq
    assert "binary: unknown op" in str(err) and f"correlation id {seq}" in str(err)
    rt.stream(0).synchronize()                       # reported once: not sticky
    with pytest.raises(runtime.PoisonedDataError, match="holds no valid data"):
        download(rt, address, (4,))                  # what it should have written is not valid
    src = np.arange(8, dtype=np.float32)             # every other call works
    assert np.array_equal(download(rt, upload(rt, src), src.shape), src)
    other = rt.stream_create(0)
    rt.event_record(rt.event_create(0), other)
    assert not rt.health(0)["needs_reset"]


def test_a_rejected_command_is_raised_at_once_under_launch_blocking():
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny", launch_blocking=True))
    address = rt.malloc(0, 64)
    ref = dev(0, address, (4,))
    with pytest.raises(runtime.CommandRejectedError, match="EMU_LAUNCH_BLOCKING=1"):
        rt.launch("binary", ("frobnicate", ref, ref, ref, F32, 1), rt.stream(0))
    src = np.arange(8, dtype=np.float32)
    assert np.array_equal(download(rt, upload(rt, src), src.shape), src)


def test_device_synchronize_waits_for_every_stream_before_raising_a_rejection(rt):
    address = rt.malloc(0, 64)
    ref = dev(0, address, (4,))
    good = rt.malloc(0, 64)
    s1 = rt.stream_create(0)
    rt.launch("binary", ("frobnicate", ref, ref, ref, F32, 1), rt.stream(0))
    rt.launch("fill", (dev(0, good, (4,)), 2.0), s1)
    mark = s1.pending_mark()
    with pytest.raises(runtime.CommandRejectedError):
        rt.device_synchronize(0)
    assert s1.mark_passed(mark)


def test_unknown_kernel_is_operation_scope(rt):
    address = rt.malloc(0, 64)
    rt.launch("no_such_kernel", (dev(0, address, (4,)),), rt.stream(0))
    with pytest.raises(runtime.CommandRejectedError, match="no kernel named 'no_such_kernel'"):
        rt.stream(0).synchronize()
    src = np.arange(8, dtype=np.float32)
    assert np.array_equal(download(rt, upload(rt, src), src.shape), src)


# -- initialisation errors ----------------------------------------------------------

def test_invalid_configuration_names_the_field(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[device.hbm]\ncapacity_bytes = 12\n")
    with pytest.raises(runtime.EmuError) as info:
        runtime.Runtime(settings=runtime.Settings(config_path=str(path)))
    assert info.value.code == ErrorCode.INVALID_CONFIGURATION
    assert "device.hbm.capacity_bytes" in str(info.value)


def test_config_file_wins_over_preset(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text("num_devices = 1\n[device.hbm]\ncapacity_bytes = 8388608\n")
    rt = runtime.Runtime(settings=runtime.Settings(preset="default", config_path=str(path)))
    assert rt.device_count == 1
    assert rt.mem_get_info(0) == (8 * MiB, 8 * MiB)


def test_unknown_preset_is_an_invalid_configuration():
    with pytest.raises(runtime.EmuError) as info:
        runtime.Runtime(settings=runtime.Settings(preset="no-such-chip"))
    assert info.value.code == ErrorCode.INVALID_CONFIGURATION


def test_firmware_version_mismatch_at_init():
    with pytest.raises(runtime.InitializationError) as info:
        runtime.Runtime(settings=runtime.Settings(preset="tiny"), firmware_image=FirmwareImage.build(version=(9, 0, 0)))
    assert info.value.code == ErrorCode.FIRMWARE_VERSION_MISMATCH
    assert "9.0.0" in str(info.value)
    assert info.value.__cause__.status == DriverStatus.FIRMWARE_VERSION_MISMATCH


# -- host clock ---------------------------------------------------------------------

def test_api_calls_advance_the_host_clock(rt):
    per_call = rt.config.host.api_call_ns
    assert per_call > 0 and rt.clock.now_ns == 0
    rt.malloc(0, 64)
    assert rt.clock.now_ns == per_call and rt.clock.api_calls == 1
    address = rt.malloc(0, 64)   # served from the cached segment: the allocator's cost, no driver call
    assert rt.clock.now_ns == per_call + rt.config.host.cached_alloc_ns and rt.clock.cached_allocs == 1
    rt.memset(dev(0, address, (16,)), 0.0, rt.stream(0))
    assert rt.clock.now_ns == 2 * per_call + rt.config.host.cached_alloc_ns and rt.clock.api_calls == 2


def test_synchronize_moves_the_host_clock_to_the_fence(rt):
    s = rt.stream(0)
    big = np.ones(1 << 18, np.float32)
    rt.memcpy(dev(0, rt.malloc(0, big.nbytes), big.shape), host(big), s)
    before = rt.clock.now_ns
    s.synchronize()
    fence = rt.driver.semaphore_time_ns(0, s.semaphore)
    assert fence > before + rt.config.host.api_call_ns  # the device was the slower one
    assert rt.clock.now_ns == fence
    assert rt.clock.waited_ns > 0
    # Once the device is idle, synchronising again only costs the call.
    s.synchronize()
    assert rt.clock.now_ns == fence + rt.config.host.api_call_ns
