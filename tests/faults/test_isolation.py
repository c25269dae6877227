"""Isolation: a kernel of one context that names another context's address gets a page fault,
never that memory (each context has its own page table; the MMU checks every access)."""
import numpy as np
import pytest

import runtime
from runtime import ErrorCode

from fault_helpers import F32, dev, download, upload

N = 256


def _other_context_buffer(rt):
    """A second context on device 0 (opened at the driver level) with data at an address the
    runtime's context has not mapped."""
    drv = rt.driver
    other = drv.open_context(0)
    queue = drv.create_queue(other)
    secret = np.full(N, 42.0, np.float32)
    mine = {va for va in rt.device(0).context.space.mappings}
    for _ in range(8):  # past every range the runtime's context mapped
        va = drv.allocate(other, 1 << 20)
        if all(not (m <= va < m + size) for m, (_, size) in rt.device(0).context.space.mappings.items()) \
                and va not in mine:
            break
    drv.submit_copy(queue, runtime.TensorRef(False, 0, va, F32, (N,), (1,)),
                    runtime.TensorRef(True, -1, secret.ctypes.data, F32, (N,), (1,)))
    sem = drv.new_semaphore(0)
    target = drv.semaphore_value(0, sem) + 1
    drv.submit_signal(queue, sem, target)
    drv.wait_semaphore(0, sem, target)
    return drv, other, queue, va, secret


@pytest.mark.parametrize("access", ["read", "write"])
def test_kernel_naming_another_contexts_address_page_faults(rt, access):
    mine = upload(rt, 0, np.zeros(N))
    drv, other, queue, theirs, secret = _other_context_buffer(rt)
    stream = rt.stream(0)
    if access == "read":   # copy their buffer into mine
        rt.launch("copy", (dev(0, mine, N), dev(0, theirs, N)), stream)
    else:                  # overwrite theirs
        rt.launch("fill", (dev(0, theirs, N), -1.0), stream)
    with pytest.raises(runtime.DeviceFaultError) as info:
        stream.synchronize()
    assert info.value.code == ErrorCode.ILLEGAL_ADDRESS
    record = info.value.__cause__.record
    assert record.status.name == "PAGE_FAULT" and record.address == theirs
    assert record.asid == rt.device(0).context.asid
    # their data is untouched, and reading it from their own context works
    out = np.zeros(N, np.float32)
    drv.submit_copy(queue, runtime.TensorRef(True, -1, out.ctypes.data, F32, (N,), (1,)),
                    runtime.TensorRef(False, 0, theirs, F32, (N,), (1,)))
    sem = drv.new_semaphore(0)
    target = drv.semaphore_value(0, sem) + 1
    drv.submit_signal(queue, sem, target)
    drv.wait_semaphore(0, sem, target)
    drv.check_context(other)
    assert (out == secret).all()
    rt.reset_device(0, "isolation test")
    if access == "read":  # the faulted copy's output never got their data: it says so
        with pytest.raises(runtime.PoisonedDataError):
            download(rt, 0, mine, N)
    else:
        assert (download(rt, 0, mine, N) == 0).all()
