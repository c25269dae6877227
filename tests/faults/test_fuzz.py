"""Property-based fuzzing (hypothesis) of the driver's submission interface with malformed
commands and descriptors, with or without a hardware fault armed: every call answers with a
status (a DriverError) or succeeds, the device reports what it then finds as a fault record, the
emulator never crashes, and (after the reset that ends each example) a tensor of another context
kept its value.

Host descriptors stay valid pointers into a real host buffer: the driver takes a host address
as a user pointer it cannot check (a real driver would pin the user's pages), so a wild host
pointer is outside what this interface can promise.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver import FAULT_KINDS, Driver, DriverError, TensorRef
from emulator.config import load_preset

F32 = 8
N = 64
WINDOW = 1 << 40


@pytest.fixture(scope="module")
def rig():
    drv = Driver(load_preset("tiny"))
    witness_ctx = drv.open_context(0)
    witness_queue = drv.create_queue(witness_ctx)
    witness = drv.allocate(witness_ctx, 4 * N)
    data = np.arange(N, dtype=np.float32)
    drv.submit_copy(witness_queue, TensorRef(False, 0, witness, F32, (N,), (1,)),
                    TensorRef(True, -1, data.ctypes.data, F32, (N,), (1,)))
    _sync(drv, witness_queue)
    return drv, witness_ctx, witness_queue, witness, data


def _sync(drv, queue):
    sem = drv.new_semaphore(queue.device)
    value = drv.semaphore_value(queue.device, sem) + 1
    drv.submit_signal(queue, sem, value)
    drv.wait_semaphore(queue.device, sem, value)
    drv.release_semaphore(queue.device, sem, value)


ints = st.one_of(st.integers(-3, 70), st.integers(-(1 << 64), 1 << 64), st.sampled_from([0, 1, 2]))
junk = st.one_of(st.none(), st.floats(allow_nan=True), st.text(max_size=3), st.lists(st.integers(), max_size=2),
                 st.binary(max_size=2))
dims = st.lists(st.one_of(st.integers(0, 9), st.integers(-2, 2), junk), max_size=4).map(tuple)


@st.composite
def device_refs(draw, base):
    address = draw(st.one_of(st.just(base), st.integers(base - 4096, base + 1 << 20),
                             st.integers(WINDOW, 3 * WINDOW), st.integers(-5, 5), junk))
    dtype = draw(st.one_of(st.sampled_from([0, 4, 5, 7, 8, 9, 13]), st.integers(-2, 40), junk))
    shape = draw(st.one_of(dims, st.just((N,))))
    strides = draw(st.one_of(dims, st.just((1,)), st.just((0,))))
    device = draw(st.one_of(st.just(0), st.integers(-2, 3), junk))
    return TensorRef(False, device, address, dtype, shape, strides)


@st.composite
def commands(draw, base, host_buffer):
    kind = draw(st.sampled_from(["copy", "fill", "launch", "signal", "wait", "raw_ref"]))
    ref = device_refs(base)
    host = TensorRef(True, -1, host_buffer.ctypes.data, F32, (N,), (1,))
    if kind == "copy":
        src = draw(st.one_of(ref, st.just(host)))
        dst = draw(st.one_of(ref, st.just(host)))
        return kind, (dst, src)
    if kind == "fill":
        return kind, (draw(ref), draw(st.one_of(st.floats(allow_nan=True), st.integers(), junk)))
    if kind == "launch":
        name = draw(st.one_of(st.sampled_from(["fill", "binary", "unary", "copy", "nope"]), st.text(max_size=5), junk))
        out = draw(ref)
        same = TensorRef(False, out.device, draw(st.one_of(st.just(base), st.integers(base, base + 4096))),
                         out.dtype, out.shape, out.strides)
        args = draw(st.one_of(
            st.just(("add", out, same, same, F32, 1.0)), st.just((out, 1.0)),
            st.lists(st.one_of(ref, ints, st.floats(), st.text(max_size=3), junk), max_size=4).map(tuple)))
        return kind, (name, args)
    if kind in ("signal", "wait"):
        return kind, (draw(st.one_of(ints, junk)), draw(st.one_of(ints, junk)), draw(st.one_of(ints, junk)))
    return kind, (draw(ref),)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_malformed_submissions_get_a_status_never_a_crash_or_a_corrupted_tensor(rig, data):
    drv, witness_ctx, witness_queue, witness, values = rig
    ctx = drv.open_context(0)
    queue = drv.create_queue(ctx)
    base = drv.allocate(ctx, 4 * N)
    host_buffer = np.zeros(N, np.float32)
    fault = data.draw(st.one_of(st.none(), st.sampled_from(sorted(FAULT_KINDS))))
    if fault is not None:  # a hardware fault armed on top of the malformed commands
        drv.inject_fault(0, fault, {"probability": 0.5, "seed": 1, "persistent": True})
    for kind, args in data.draw(st.lists(commands(base, host_buffer), min_size=1, max_size=6)):
        try:
            if kind == "copy":
                drv.submit_copy(queue, *args)
            elif kind == "fill":
                drv.submit_fill(queue, *args)
            elif kind == "launch":
                drv.submit_launch(queue, *args)
            elif kind == "signal":
                drv.submit_signal(queue, args[0], args[1])
            elif kind == "wait":
                drv.submit_wait(queue, args[0], args[1], args[2])
            else:
                drv.submit_launch(queue, "fill", (args[0], 0.0))
        except DriverError:
            pass  # a status: the call was refused, nothing was queued
    try:
        _sync(drv, queue)
        drv.check_context(ctx)
    except DriverError:
        pass  # a device fault of this context (sticky), a wait nobody can satisfy, or a reported bug
    drv.clear_faults(0)
    drv.reset_device(0, "fuzz example done")  # unblocks a queue left waiting on a never-signalled fence
    # the emulator still runs, and another context's tensor kept its value
    out = np.zeros(N, np.float32)
    drv.submit_copy(witness_queue, TensorRef(True, -1, out.ctypes.data, F32, (N,), (1,)),
                    TensorRef(False, 0, witness, F32, (N,), (1,)))
    _sync(drv, witness_queue)
    drv.check_context(witness_ctx)
    assert (out == values).all()
