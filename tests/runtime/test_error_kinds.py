"""Emulator bugs vs device faults vs user errors, as the runtime reports them."""
import dataclasses

import numpy as np
import pytest

import runtime
from driver import DriverError, DriverStatus
from emulator.errors import EmulatorBug
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS
from runtime import ErrorCode, Scope, TensorRef
from runtime.errors import EmulatorBugError

F32 = dtypes.FLOAT32


def host(arr):
    return TensorRef(True, -1, arr.ctypes.data, F32, arr.shape, tuple(s // arr.itemsize for s in arr.strides))


def dev(address, n):
    return TensorRef(False, 0, address, F32, (n,), (1,))


def _chain(err):
    while err is not None:
        yield err
        err = err.__cause__


# -- a wait nothing will ever satisfy: the user's error, stream scope -----------------------

def test_stream_waiting_on_an_event_nobody_signals_is_a_stream_error(rt):
    stream = rt.stream_create(0)
    never = rt.event_create(0)
    never.count = never.base + 1          # as if recorded, but no signal was ever queued
    rt.stream_wait_event(stream, never)
    with pytest.raises(runtime.StreamError) as info:
        stream.synchronize()
    err = info.value
    assert err.scope == Scope.STREAM and err.code == ErrorCode.DEADLOCK
    message = str(err)
    assert f"stream emu:0/{stream.stream_id}" in message                    # which stream waited
    assert f"semaphore {stream.semaphore} to reach 1 (it is at 0)" in message  # which fence, where it is
    assert "no queued work can ever signal it" in message
    assert not isinstance(err, EmulatorBugError)
    drv_err = err.__cause__
    assert isinstance(drv_err, DriverError) and drv_err.status == DriverStatus.DEADLOCK
    assert not any(isinstance(e, EmulatorBug) for e in _chain(err))        # not an emulator bug
    # Stream scope: the device's context is not poisoned.
    assert rt.device(0).context.fault is None
    src = np.arange(4, dtype=np.float32)
    address = rt.malloc(0, src.nbytes)
    rt.memcpy(dev(address, 4), host(src), rt.stream(0))
    out = np.zeros(4, np.float32)
    rt.memcpy(host(out), dev(address, 4), rt.stream(0), blocking=True)
    assert np.array_equal(out, src)


def test_event_synchronize_that_can_never_complete_names_the_event(rt):
    never = rt.event_create(0)
    never.count = never.base + 3
    with pytest.raises(runtime.StreamError) as info:
        rt.event_synchronize(never)
    message = str(info.value)
    assert f"event emu:0 (semaphore {never.semaphore}" in message
    assert f"semaphore {never.semaphore} to reach 3 (it is at 0)" in message


def test_deadlock_is_not_an_emulator_bug():
    from emulator.system import Deadlock
    assert not issubclass(Deadlock, EmulatorBug)


# -- an emulator bug: operation scope, reported once, never sticky ----------------------------

def test_emulator_bug_is_an_emulator_bug_error_once_and_the_device_stays_usable(rt, monkeypatch):
    def boom(*args):
        raise RuntimeError("boom")

    src = np.arange(8, dtype=np.float32)
    keep = rt.malloc(0, src.nbytes)
    rt.memcpy(dev(keep, 8), host(src), rt.stream(0))
    target = rt.malloc(0, src.nbytes)
    monkeypatch.setitem(KERNELS, "fill", dataclasses.replace(KERNELS["fill"], run=boom))
    rt.memset(dev(target, 8), 1.0, rt.stream(0))
    with pytest.raises(EmulatorBugError) as info:
        rt.stream(0).synchronize()
    err = info.value
    assert err.code == ErrorCode.INTERNAL and err.scope == Scope.OPERATION
    message = str(err)
    assert "internal emulator bug, not a device fault" in message
    assert "RuntimeError: boom" in message
    assert "Traceback (most recent call last)" in message and "in boom" in message
    assert "Traceback" in err.traceback
    drv_err = err.__cause__
    assert isinstance(drv_err, DriverError) and drv_err.status == DriverStatus.INTERNAL_ERROR
    assert drv_err.record.detail == "RuntimeError: boom"

    monkeypatch.undo()
    rt.stream(0).synchronize()                        # not sticky: no recover needed
    out = np.zeros(8, np.float32)
    rt.memcpy(host(out), dev(keep, 8), rt.stream(0), blocking=True)
    assert np.array_equal(out, src)                   # other memory kept its values
    rt.memset(dev(target, 8), 2.0, rt.stream(0))
    rt.memcpy(host(out), dev(target, 8), rt.stream(0), blocking=True)
    assert (out == 2.0).all()
