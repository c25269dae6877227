"""The host driver (driver/): discovery, firmware handshake, memory, validation, submission, recovery."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from driver import Driver, DriverError, DriverStatus, FirmwareRecordError, TensorRef
from driver.memory_manager import VA_WINDOW, PhysicalAllocator
from emulator.kernels import dtypes
from firmware import FirmwareImage, abi

MiB = 1 << 20
F32 = dtypes.FLOAT32


def dev_ref(va, n, device=0, dtype=F32, strides=(1,)):
    return TensorRef(False, device, va, dtype, (n,), strides)


def host_ref(arr, dtype=F32):
    return TensorRef(True, -1, arr.ctypes.data, dtype, arr.shape, tuple(s // arr.itemsize for s in arr.strides))


def sync(drv, queue, value=1):
    sem = drv.new_semaphore(queue.device)
    drv.submit_signal(queue, sem, value)
    return drv.wait_semaphore(queue.device, sem, value)


# -- discovery and firmware ------------------------------------------------------

def test_enumerates_two_devices(drv):
    assert drv.device_count == 2
    assert drv.firmware_versions == [abi.FIRMWARE_VERSION] * 2
    assert drv.device_properties(1).hbm.capacity_bytes == 64 * MiB


def test_firmware_major_version_mismatch_is_refused(tiny):
    with pytest.raises(DriverError) as info:
        Driver(tiny, FirmwareImage.build(version=(9, 0, 0)))
    err = info.value
    assert err.status == DriverStatus.FIRMWARE_VERSION_MISMATCH
    assert "9.0.0" in str(err)                                          # what was loaded
    assert ".".join(map(str, abi.FIRMWARE_VERSION)) in str(err)         # what the driver speaks
    assert err.details["firmware_version"] == (9, 0, 0)
    assert err.details["driver_major"] == abi.ABI_MAJOR


def test_newer_minor_firmware_is_accepted(tiny):
    drv = Driver(tiny, FirmwareImage.build(version=(abi.ABI_MAJOR, abi.ABI_MINOR + 3, 7)))
    assert drv.firmware_versions[0] == (abi.ABI_MAJOR, abi.ABI_MINOR + 3, 7)


@pytest.mark.parametrize("device", [2, -1, "0", None])
def test_invalid_device_index_says_what_exists(drv, device):
    with pytest.raises(DriverError) as info:
        drv.open_context(device)
    assert info.value.status == DriverStatus.INVALID_DEVICE
    message = str(info.value)
    assert repr(device) in message
    assert "2 devices" in message and "0..1" in message


# -- memory ------------------------------------------------------------------------

def test_allocate_release_and_memory_info(drv):
    ctx = drv.open_context(0)
    free0, total = drv.memory_info(0)
    assert (free0, total) == (64 * MiB, 64 * MiB)
    va = drv.allocate(ctx, MiB)
    assert drv.device_of_address(va) == 0
    assert drv.memory_info(0) == (free0 - MiB, total)
    small = drv.allocate(ctx, 100)                 # rounded up to one 64 KiB page
    assert drv.memory_info(0)[0] == free0 - MiB - 64 * 1024
    assert small != va
    drv.release(ctx, va)
    drv.release(ctx, small)
    assert drv.memory_info(0) == (free0, total)
    assert drv.memory_info(1) == (64 * MiB, 64 * MiB)   # device 1 untouched


def test_allocations_are_mapped_with_guard_pages(drv):
    ctx = drv.open_context(1)
    a = drv.allocate(ctx, 64 * 1024)
    b = drv.allocate(ctx, 64 * 1024)
    assert VA_WINDOW * 2 <= a < VA_WINDOW * 3       # device 1's window
    assert b - a > 64 * 1024                         # not adjacent: a guard page between


def test_release_of_unknown_address(drv):
    ctx = drv.open_context(0)
    va = drv.allocate(ctx, 4096)
    with pytest.raises(DriverError) as info:
        drv.release(ctx, va + 4096)
    assert info.value.status == DriverStatus.INVALID_HANDLE
    drv.release(ctx, va)
    with pytest.raises(DriverError):
        drv.release(ctx, va)                         # double free


@pytest.mark.parametrize("size", [0, -5, 1.5, "1"])
def test_allocate_rejects_bad_sizes(drv, size):
    with pytest.raises(DriverError) as info:
        drv.allocate(drv.open_context(0), size)
    assert info.value.status == DriverStatus.INVALID_ARGUMENT


def test_out_of_memory_status_with_numbers(drv):
    ctx = drv.open_context(0)
    drv.allocate(ctx, 60 * MiB)
    with pytest.raises(DriverError) as info:
        drv.allocate(ctx, 8 * MiB)
    err = info.value
    assert err.status == DriverStatus.OUT_OF_MEMORY
    assert err.details == {"requested": 8 * MiB, "free": 4 * MiB}
    assert str(8 * MiB) in str(err) and str(4 * MiB) in str(err)
    assert drv.memory_info(0)[0] == 4 * MiB          # nothing leaked by the failure
    drv.allocate(ctx, 4 * MiB)                       # what fits still works


def test_physical_allocator_coalesces_freed_neighbours(drv):
    ctx = drv.open_context(0)
    a = drv.allocate(ctx, 16 * MiB)
    b = drv.allocate(ctx, 16 * MiB)
    c = drv.allocate(ctx, 32 * MiB)                  # the device is now full
    assert drv.memory_info(0)[0] == 0
    drv.release(ctx, b)
    drv.release(ctx, a)
    assert drv.memory_info(0)[0] == 32 * MiB
    ab = drv.allocate(ctx, 32 * MiB)                 # needs A and B merged into one run
    assert drv.memory_info(0)[0] == 0
    drv.release(ctx, c)
    drv.release(ctx, ab)
    assert drv._physical[0].largest_free == 64 * MiB


def test_physical_allocator_first_fit_and_order():
    pa = PhysicalAllocator(1 * MiB, 64 * 1024)
    a, b, c = pa.allocate(64 * 1024), pa.allocate(128 * 1024), pa.allocate(64 * 1024)
    assert (a, b, c) == (0, 64 * 1024, 192 * 1024)
    pa.release(a, 64 * 1024)
    pa.release(b, 128 * 1024)                       # free A then B this time
    assert pa.allocate(192 * 1024) == 0
    assert pa.allocate(2 * MiB) is None


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 6), st.integers(0, 20)), max_size=40))
def test_physical_allocator_invariants(ops):
    page = 4096
    pa = PhysicalAllocator(32 * page, page)
    live = {}
    for is_alloc, pages, pick in ops:
        if is_alloc or not live:
            start = pa.allocate(pages * page)
            if start is not None:
                assert all(start + pages * page <= s or s + n <= start for s, n in live.items())
                live[start] = pages * page
            else:
                assert pa.largest_free < pages * page
        else:
            start = sorted(live)[pick % len(live)]
            pa.release(start, live.pop(start))
        free = pa._free
        assert free == sorted(free)
        assert all(s1 + n1 < s2 for (s1, n1), (s2, _) in zip(free, free[1:]))  # disjoint and coalesced
        assert pa.used == sum(live.values())
        assert pa.free_bytes + pa.used == 32 * page
    for start, n in list(live.items()):
        pa.release(start, n)
    assert pa._free == [(0, 32 * page)]


# -- validation ------------------------------------------------------------------

@pytest.fixture
def queue(drv):
    return drv.create_queue(drv.open_context(0))


def assert_nothing_submitted(drv, queue):
    ep = drv.transport.devices[queue.device]
    assert ep.ring_free_slots(queue.ring_id) == drv.config.device.command_processor.ring_entries


BAD_COPIES = {
    "unknown dtype code": lambda va, h: (dev_ref(va, 4, dtype=42), TensorRef(True, -1, h, 42, (4,), (1,))),
    "mismatched rank": lambda va, h: (TensorRef(False, 0, va, F32, (2, 2), (2,)), TensorRef(True, -1, h, F32, (2, 2), (2, 1))),
    "negative strides": lambda va, h: (dev_ref(va, 4, strides=(-1,)), TensorRef(True, -1, h, F32, (4,), (1,))),
    "negative shape": lambda va, h: (TensorRef(False, 0, va, F32, (-4,), (1,)), TensorRef(True, -1, h, F32, (-4,), (1,))),
    "host to host": lambda va, h: (TensorRef(True, -1, h, F32, (4,), (1,)), TensorRef(True, -1, h, F32, (4,), (1,))),
    "shape mismatch": lambda va, h: (dev_ref(va, 4), TensorRef(True, -1, h, F32, (5,), (1,))),
    "dtype mismatch": lambda va, h: (dev_ref(va, 4), TensorRef(True, -1, h, dtypes.INT32, (4,), (1,))),
    "null address": lambda va, h: (dev_ref(va, 4), TensorRef(True, -1, 0, F32, (4,), (1,))),
    "not a TensorRef": lambda va, h: ((False, 0, va, F32, (4,), (1,)), TensorRef(True, -1, h, F32, (4,), (1,))),
    "peer without context": lambda va, h: (dev_ref(va, 4, device=1), TensorRef(True, -1, h, F32, (4,), (1,))),
    "no such device": lambda va, h: (dev_ref(va, 4, device=7), TensorRef(True, -1, h, F32, (4,), (1,))),
}


@pytest.mark.parametrize("case", sorted(BAD_COPIES))
def test_bad_copy_descriptors_are_rejected_without_submitting(drv, queue, case):
    va = drv.allocate(queue.context, 4096)
    host = np.zeros(16, np.float32)
    dst, src = BAD_COPIES[case](va, host.ctypes.data)
    with pytest.raises(DriverError) as info:
        drv.submit_copy(queue, dst, src)
    expected = DriverStatus.INVALID_DEVICE if case == "no such device" else DriverStatus.INVALID_ARGUMENT
    assert info.value.status == expected
    assert_nothing_submitted(drv, queue)


def test_rank_above_maximum_is_rejected(drv, queue):
    # The maximum is torch's own limit of dim lists, 64 (it was 12, below what CPU handles: issue 18).
    from driver.driver import MAX_RANK
    assert MAX_RANK == 64
    va = drv.allocate(queue.context, 4096)
    ref = TensorRef(False, 0, va, F32, (1,) * 65, (1,) * 65)
    with pytest.raises(DriverError, match="rank <= 64") as info:
        drv.submit_fill(queue, ref, 0.0)
    assert info.value.status == DriverStatus.INVALID_ARGUMENT
    assert_nothing_submitted(drv, queue)


def test_rank_64_is_accepted(drv, queue):
    va = drv.allocate(queue.context, 4096)
    drv.submit_fill(queue, TensorRef(False, 0, va, F32, (1,) * 62 + (2, 3), (6,) * 62 + (3, 1)), 0.0)


@pytest.mark.parametrize("value_or_dst", ["host dst", "string value"])
def test_bad_fills_are_rejected(drv, queue, value_or_dst):
    va = drv.allocate(queue.context, 4096)
    host = np.zeros(4, np.float32)
    with pytest.raises(DriverError) as info:
        if value_or_dst == "host dst":
            drv.submit_fill(queue, host_ref(host), 1.0)
        else:
            drv.submit_fill(queue, dev_ref(va, 4), "1.0")
    assert info.value.status == DriverStatus.INVALID_ARGUMENT
    assert_nothing_submitted(drv, queue)


def test_bad_launch_argument_is_rejected(drv, queue):
    va = drv.allocate(queue.context, 4096)
    with pytest.raises(DriverError) as info:
        drv.submit_launch(queue, "fill", (dev_ref(va, 4), object()))
    assert info.value.status == DriverStatus.INVALID_ARGUMENT
    assert_nothing_submitted(drv, queue)


# -- submission and completion -----------------------------------------------------

def test_copy_round_trip(drv, queue):
    va = drv.allocate(queue.context, 4096)
    src = np.arange(512, dtype=np.float32)
    out = np.zeros_like(src)
    seq1 = drv.submit_copy(queue, dev_ref(va, 512), host_ref(src))
    seq2 = drv.submit_copy(queue, host_ref(out), dev_ref(va, 512))
    assert seq2 > seq1
    assert not out.any()                             # asynchronous until the host waits
    t = sync(drv, queue)
    assert np.array_equal(out, src)
    assert t == drv.now_ns > 0


def test_peer_copy_needs_and_uses_the_peer_context(drv):
    c0, c1 = drv.open_context(0), drv.open_context(1)
    q0 = drv.create_queue(c0)
    a, b = drv.allocate(c0, 4096), drv.allocate(c1, 4096)
    src = np.arange(256, dtype=np.float32)
    out = np.zeros_like(src)
    drv.submit_copy(q0, dev_ref(a, 256), host_ref(src))
    drv.submit_copy(q0, dev_ref(b, 256, device=1), dev_ref(a, 256), peer_asids={1: c1.asid})
    drv.submit_copy(q0, host_ref(out), dev_ref(b, 256, device=1), peer_asids={1: c1.asid})
    sync(drv, q0)
    assert np.array_equal(out, src)
    assert drv.telemetry(0)["kernel_stats"]["memcpy_p2p"].count == 1


def test_back_pressure_when_the_ring_is_full(drv, queue, clock):
    entries = drv.config.device.command_processor.ring_entries
    assert entries == 64
    va = drv.allocate(queue.context, 64 * 1024)
    n = 100
    for i in range(n):                               # no waiting in between
        drv.submit_fill(queue, dev_ref(va, 4096), float(i))
    assert clock.now_ns > 0 and clock.waited_ns > 0  # the host blocked on a full ring
    sync(drv, queue)
    assert drv.telemetry(0)["kernel_stats"]["fill"].count == n
    out = np.zeros(4096, np.float32)
    drv.submit_copy(queue, host_ref(out), dev_ref(va, 4096))
    sync(drv, queue, 2)
    assert (out == n - 1).all()


def test_wait_semaphore_moves_the_host_clock_to_the_fence(drv, queue, clock):
    va = drv.allocate(queue.context, MiB)
    src = np.ones(MiB // 4, np.float32)
    drv.submit_copy(queue, dev_ref(va, MiB // 4), host_ref(src))
    assert clock.now_ns == 0
    t = sync(drv, queue)
    assert clock.now_ns == t > MiB / drv.config.host_link.bandwidth_gb_per_s


def test_wait_that_can_never_complete_is_a_deadlock(drv, queue):
    sem = drv.new_semaphore(0)
    drv.submit_wait(queue, 0, sem, 1)                # nobody ever signals sem
    with pytest.raises(DriverError) as info:
        sync(drv, queue)
    assert info.value.status == DriverStatus.DEADLOCK
    assert "can never reach" in str(info.value)


# -- faults and recovery ---------------------------------------------------------

def fault(drv, queue):
    va = drv.allocate(queue.context, 4096)
    src = np.ones(16, np.float32)
    drv.submit_copy(queue, dev_ref(va + 10 * MiB, 16), host_ref(src))   # not mapped
    sync(drv, queue)
    return va + 10 * MiB


def test_page_fault_becomes_a_sticky_context_fault(drv, queue):
    bad = fault(drv, queue)
    with pytest.raises(FirmwareRecordError) as info:
        drv.check_context(queue.context)
    err = info.value
    assert err.status == DriverStatus.CONTEXT_FAULTED
    assert err.record.status == abi.Status.PAGE_FAULT
    assert err.record.address == bad
    assert err.record.asid == queue.context.asid
    assert f"0x{bad:x}" in str(err) and "PAGE_FAULT" in str(err)
    with pytest.raises(FirmwareRecordError) as again:
        drv.check_context(queue.context)
    assert again.value is err                        # the first fault sticks


def test_fault_in_one_context_leaves_others_alone(drv, queue):
    other = drv.open_context(0)
    fault(drv, queue)
    drv.check_context(other)                         # no exception


def test_recover_dumps_state_clears_faults_and_is_idempotent(drv, queue):
    fault(drv, queue)
    dump = drv.recover(0, "test")
    assert dump["device"] == 0 and dump["reason"] == "test"
    assert len(dump["faults"]) == 1
    assert dump["faults"][0]["status"] == abi.Status.PAGE_FAULT
    assert dump["memory_used"] == 64 * 1024
    drv.check_context(queue.context)                 # cleared
    second = drv.recover(0, "again")
    assert second["faults"] == []
    assert drv.resets == 2
    # The context runs work again (the firmware forgot the fault too).
    va = drv.allocate(queue.context, 4096)
    out = np.zeros(8, np.float32)
    drv.submit_fill(queue, dev_ref(va, 8), 6.0)
    drv.submit_copy(queue, host_ref(out), dev_ref(va, 8))
    sync(drv, queue, 1)
    assert (out == 6.0).all()
    drv.check_context(queue.context)


def test_recover_of_a_healthy_device(drv):
    dump = drv.recover(1, "nothing wrong")
    assert dump["faults"] == [] and dump["memory_used"] == 0


# -- virtual address spaces ------------------------------------------------------

def test_address_space_reuses_released_ranges(drv):
    ctx = drv.open_context(0)
    page = drv.transport.devices[0].page_size
    a = drv.allocate(ctx, 4 * page)
    b = drv.allocate(ctx, page)
    assert b == a + 5 * page                          # a's range plus its guard page
    drv.release(ctx, a)
    assert drv.allocate(ctx, 2 * page) == a           # first fit: a's freed range again
    c = drv.allocate(ctx, page)
    assert c == a + 3 * page                          # the rest of a's range, guard included
    drv.release(ctx, b)
    drv.release(ctx, c)


def test_a_request_beyond_the_window_is_refused_not_placed_in_another_device(drv):
    from driver.memory_manager import AddressSpace, AddressSpaceExhausted
    space = AddressSpace(0, 7, 64 << 10)
    first = space.reserve(VA_WINDOW // 2)
    assert VA_WINDOW <= first < 2 * VA_WINDOW
    with pytest.raises(AddressSpaceExhausted, match="window"):
        space.reserve(VA_WINDOW // 2)                 # the guard page makes it not fit
    space.release(first, VA_WINDOW // 2)
    assert space.reserve(VA_WINDOW // 2) == first     # reusable once released
    ctx = drv.open_context(1)
    with pytest.raises(DriverError) as info:
        drv.allocate(ctx, VA_WINDOW)                  # never an address of device 2's window
    assert info.value.status == DriverStatus.OUT_OF_MEMORY and "window" in str(info.value)
    assert drv.memory_info(1)[0] == drv.memory_info(1)[1]   # nothing was allocated
