"""An emulator bug (the firmware's INTERNAL_ERROR interrupt) reaches the host as
``DriverError(INTERNAL_ERROR)`` once, at the next synchronising call, and is never sticky."""
import dataclasses

import numpy as np
import pytest

from driver import DriverError, DriverStatus, TensorRef
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS
from firmware import abi

F32 = dtypes.FLOAT32


def dev_ref(va, n):
    return TensorRef(False, 0, va, F32, (n,), (1,))


def host_ref(arr):
    return TensorRef(True, -1, arr.ctypes.data, F32, arr.shape, tuple(s // arr.itemsize for s in arr.strides))


def sync(drv, queue, value=1):
    sem = drv.new_semaphore(queue.device)
    drv.submit_signal(queue, sem, value)
    return drv.wait_semaphore(queue.device, sem, value)


@pytest.fixture
def queue(drv):
    return drv.create_queue(drv.open_context(0))


def test_emulator_bug_is_raised_once_at_the_next_wait_then_the_driver_works(drv, queue, monkeypatch):
    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setitem(KERNELS, "fill", dataclasses.replace(KERNELS["fill"], run=boom))
    va = drv.allocate(queue.context, 4096)
    seq = drv.submit_fill(queue, dev_ref(va, 8), 1.0)
    with pytest.raises(DriverError) as info:
        sync(drv, queue)
    err = info.value
    assert err.status == DriverStatus.INTERNAL_ERROR
    assert isinstance(err.record, abi.InternalErrorRecord)
    assert err.record.seq == seq and err.record.asid == queue.context.asid and err.record.device == 0
    assert err.record.detail == "RuntimeError: boom"
    assert "Traceback" in err.record.traceback and "in boom" in err.record.traceback
    assert "INTERNAL_ERROR" in str(err) and "boom" in str(err)

    # Reported once, never sticky: the context is healthy and the next calls work.
    drv.check_context(queue.context)
    assert queue.context.fault is None
    monkeypatch.undo()
    out = np.zeros(8, np.float32)
    drv.submit_fill(queue, dev_ref(va, 8), 6.0)
    drv.submit_copy(queue, host_ref(out), dev_ref(va, 8))
    sync(drv, queue)
    assert (out == 6.0).all()


def test_check_context_also_reports_a_pending_emulator_bug_once(drv, queue, monkeypatch):
    def boom(*args):
        raise KeyError("oops")

    monkeypatch.setitem(KERNELS, "fill", dataclasses.replace(KERNELS["fill"], run=boom))
    va = drv.allocate(queue.context, 4096)
    sem = drv.new_semaphore(0)
    drv.submit_fill(queue, dev_ref(va, 8), 1.0)
    drv.submit_fill(queue, dev_ref(va, 8), 2.0)        # two bugs: one error, the other in details
    drv.submit_signal(queue, sem, 1)
    drv.transport.drain()                              # the device runs; nothing raised yet
    with pytest.raises(DriverError) as info:
        drv.check_context(queue.context)
    assert info.value.status == DriverStatus.INTERNAL_ERROR
    assert len(info.value.details["more"]) == 1
    drv.check_context(queue.context)                   # cleared
    drv.wait_semaphore(0, sem, 1)                      # and not raised again
