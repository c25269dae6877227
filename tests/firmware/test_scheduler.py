"""Firmware ring processing (firmware/scheduler.py), driven through the Platform directly."""
import numpy as np
import pytest

from emulator.kernels import dtypes
from firmware import abi

F32 = dtypes.FLOAT32
# The rig (conftest.py) maps [rig.VA, rig.VA + rig.MAPPED) of asid 1 to physical 0 on each device.


def test_fill_then_signal_writes_hbm_and_raises_completion(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    fill = rig.fill(rig.dev(256, 16), 2.5)
    sig = rig.signal(7, 1)
    rig.submit(ring, fill, sig)
    assert ep.semaphore_value(7) == 0  # nothing runs until the host advances the simulation
    t = rig.run_until_sem(7, 1)
    assert (rig.hbm(0, 256, 64, np.float32) == 2.5).all()
    assert rig.hbm(0, 256 + 64, 4, np.float32)[0] == 0  # only 16 elements
    (done,) = rig.completions(0)
    assert done == abi.Completion(0, ring, sig.seq, 7, 1, t)
    assert rig.errors(0) == []
    assert t > 0


def test_copy_round_trip_through_device_memory(rig):
    ring = rig.ep(0).create_ring()
    src = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(src)
    rig.submit(ring,
               rig.copy(rig.dev(0, 1000), rig.host(src)),
               rig.copy(rig.dev(8192, 1000), rig.dev(0, 1000)),        # device to device
               rig.copy(rig.host(out), rig.dev(8192, 1000)),
               rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    assert np.array_equal(out, src)
    assert np.array_equal(rig.hbm(0, 8192, 4000, np.float32), src)
    names = [e.name for e in rig.trace(0)]
    assert names == ["memcpy_h2d", "memcpy_d2d", "memcpy_d2h"]


def test_strided_copy_from_host_and_into_device(rig):
    ring = rig.ep(0).create_ring()
    m = np.arange(64, dtype=np.float32).reshape(8, 8)
    column = m[:, 5]                              # host stride 8 elements
    rig.submit(ring,
               rig.fill(rig.dev(0, 16), -1.0),
               rig.copy(rig.dev(0, 8, strides=(2,)), rig.host(column)),  # every other device element
               rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    got = rig.hbm(0, 0, 64, np.float32)
    assert np.array_equal(got[0::2], column)
    assert (got[1::2] == -1.0).all()


def test_launch_binary_add(rig):
    ring = rig.ep(0).create_ring()
    a = np.arange(300, dtype=np.float32)
    b = np.full(300, 0.5, dtype=np.float32)
    out = np.zeros_like(a)
    rig.submit(ring,
               rig.copy(rig.dev(0, 300), rig.host(a)),
               rig.copy(rig.dev(4096, 300), rig.host(b)),
               rig.launch("binary", ("add", rig.dev(8192, 300), rig.dev(0, 300), rig.dev(4096, 300), F32, 2)),
               rig.copy(rig.host(out), rig.dev(8192, 300)),
               rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    assert np.array_equal(out, a + 2 * b)
    add = [e for e in rig.trace(0) if e.name == "binary.add"]
    assert len(add) == 1 and add[0].engine == "vector_engine" and add[0].flops == 300
    assert rig.platform.system.devices[0].vector_engine.kernels == 1


def test_launch_matmul_runs_on_the_matrix_engine(rig):
    ring = rig.ep(0).create_ring()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    out = np.zeros((16, 4), np.float32)

    def dev2(offset, shape):
        return abi.TensorDescriptor(abi.MemorySpace.DEVICE, 0, 1, rig.VA + offset, F32, shape, (shape[1], 1))

    rig.submit(ring,
               rig.copy(dev2(0, a.shape), rig.host(a)),
               rig.copy(dev2(4096, b.shape), rig.host(b)),
               rig.launch("matmul", (dev2(8192, out.shape), dev2(0, a.shape), dev2(4096, b.shape), None, 0.0, 1.0)),
               rig.copy(rig.host(out), dev2(8192, out.shape)),
               rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    (mm,) = [e for e in rig.trace(0) if e.name == "matmul"]
    assert mm.engine == "matrix_engine" and mm.flops == 2 * 16 * 8 * 4
    assert rig.platform.system.devices[0].matrix_engine.busy_ns == pytest.approx(mm.end_ns - mm.start_ns)


# -- faults --------------------------------------------------------------------

def test_page_fault_produces_error_record_and_poisons_the_context(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    src = np.ones(256, np.float32)
    bad_va = rig.VA + rig.MAPPED + 4096                       # past the end of the mapping
    bad = abi.TensorDescriptor(abi.MemorySpace.DEVICE, 0, 1, bad_va, F32, (256,), (1,))
    faulting = rig.copy(bad, rig.host(src))
    skipped_fill = rig.fill(rig.dev(0, 16), 9.0)
    skipped_copy = rig.copy(rig.dev(4096, 256), rig.host(src))
    rig.submit(ring, faulting, rig.signal(3, 1), skipped_fill, skipped_copy, rig.signal(3, 2))
    rig.run_until_sem(3, 2)

    (record,) = rig.errors(0)
    assert isinstance(record, abi.ErrorRecord)
    assert record.status == abi.Status.PAGE_FAULT
    assert (record.device, record.ring, record.seq, record.asid) == (0, ring, faulting.seq, 1)
    assert record.unit == "dma"
    assert record.address == bad_va
    assert "address space 1" in record.detail
    # Later work of the context was skipped, but both fences completed.
    assert (rig.hbm(0, 0, 64, np.float32) == 0).all()
    assert (rig.hbm(0, 4096, 1024, np.float32) == 0).all()
    assert [c.value for c in rig.completions(0)] == [1, 2]
    assert ep.firmware.faulted_asids[1] == record
    assert ep.semaphore_value(3) == 2


def test_fault_does_not_poison_other_contexts(rig):
    ep = rig.ep(0)
    ep.create_address_space(2)
    ep.map_pages(2, rig.VA, 8 << 20, 1 << 20)          # asid 2 owns other physical memory
    r1, r2 = ep.create_ring(), ep.create_ring()
    rig.submit(r1, rig.fill(rig.dev(rig.MAPPED + 65536, 4), 1.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    assert len(rig.errors(0)) == 1
    rig.submit(r2, rig.fill(rig.dev(0, 4, asid=2), 5.0, asid=2), rig.signal(2, 1, asid=2))
    rig.run_until_sem(2, 1)
    assert (rig.hbm(0, 8 << 20, 16, np.float32) == 5.0).all()
    assert len(rig.errors(0)) == 1


def test_clear_context_fault_lets_the_context_run_again(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    rig.submit(ring, rig.fill(rig.dev(rig.MAPPED, 4), 1.0), rig.fill(rig.dev(0, 4), 1.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    assert (rig.hbm(0, 0, 16, np.float32) == 0).all()
    ep.clear_context_fault(1)
    rig.submit(ring, rig.fill(rig.dev(0, 4), 3.0), rig.signal(1, 2))
    rig.run_until_sem(1, 2)
    assert (rig.hbm(0, 0, 16, np.float32) == 3.0).all()


def test_bus_error_when_a_mapping_points_outside_hbm(rig):
    ep = rig.ep(0)
    capacity = ep.memory_bytes
    ep.map_pages(1, rig.VA + (32 << 20), capacity, ep.page_size)  # the MMU does not know the capacity
    ring = ep.create_ring()
    rig.submit(ring, rig.fill(rig.dev(32 << 20, 4), 1.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)
    assert record.status == abi.Status.BUS_ERROR
    assert record.unit == "hbm"
    assert record.address == capacity


# A command the firmware rejects is operation scope (it used to fault the context, so one bad
# argument failed every later op until a reset: issue 18): the ring's next command runs.
def test_unknown_kernel(rig):
    ring = rig.ep(0).create_ring()
    launch = rig.launch("no_such_kernel", (rig.dev(0, 4),))
    rig.submit(ring, launch, rig.fill(rig.dev(256, 4), 2.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)
    assert record.status == abi.Status.UNKNOWN_KERNEL and abi.STATUS_SCOPE[record.status] == "operation"
    assert record.seq == launch.seq
    assert "no_such_kernel" in record.detail
    assert not rig.ep(0).firmware.faulted_asids
    assert (rig.hbm(0, 256, 16, np.float32) == 2.0).all()


def test_kernel_rejecting_its_operands_is_an_invalid_argument(rig):
    ring = rig.ep(0).create_ring()
    launch = rig.launch("binary", ("frobnicate", rig.dev(0, 4), rig.dev(64, 4), rig.dev(128, 4), F32, 1))
    rig.submit(ring, launch, rig.fill(rig.dev(256, 4), 2.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)
    assert record.status == abi.Status.INVALID_ARGUMENT and abi.STATUS_SCOPE[record.status] == "operation"
    assert record.unit == "vector_engine"
    assert record.seq == launch.seq
    assert not rig.ep(0).firmware.faulted_asids
    assert (rig.hbm(0, 256, 16, np.float32) == 2.0).all()


def test_unknown_opcode_is_an_invalid_command(rig):
    ring = rig.ep(0).create_ring()
    bogus = abi.FillCommand(99, rig.seq(), 1, rig.dev(0, 4), 0.0)
    rig.submit(ring, bogus, rig.fill(rig.dev(256, 4), 2.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)
    assert record.seq == bogus.seq
    assert record.status == abi.Status.INVALID_COMMAND and abi.STATUS_SCOPE[record.status] == "operation"
    assert record.unit == "command_processor"
    assert (rig.hbm(0, 256, 16, np.float32) == 2.0).all()


def _bad_add(rig, out, a):
    """A launch the binary kernel rejects (unknown op) that should have written ``out``."""
    return rig.launch("binary", ("frobnicate", out, a, a, F32, 1))


def _poisoned_seqs(rig):
    return sorted(seq for *_, seq, _ in rig.ep(0).firmware.take_poisoned_writes())


def test_a_command_reading_what_a_rejected_command_did_not_write_is_skipped_and_poisoned(rig):
    ring = rig.ep(0).create_ring()
    bad = _bad_add(rig, rig.dev(0, 16), rig.dev(1024, 16))
    reader = rig.launch("binary", ("add", rig.dev(256, 16), rig.dev(0, 16), rig.dev(1024, 16), F32, 1))
    reader2 = rig.launch("binary", ("add", rig.dev(512, 16), rig.dev(256, 16), rig.dev(1024, 16), F32, 1))
    other = rig.fill(rig.dev(2048, 16), 4.0)             # touches nothing poisoned: runs
    rig.submit(ring, rig.fill(rig.dev(256, 16), -1.0), rig.fill(rig.dev(512, 16), -1.0), bad, reader, reader2,
               other, rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)                            # one error: the rejected command's
    assert record.seq == bad.seq
    assert (rig.hbm(0, 256, 64, np.float32) == -1.0).all()   # the readers did not run ...
    assert (rig.hbm(0, 512, 64, np.float32) == -1.0).all()
    assert (rig.hbm(0, 2048, 64, np.float32) == 4.0).all()
    assert [p.seq for v, p in rig.irqs[0] if v == abi.Irq.POISONED] == [reader.seq, reader2.seq]
    assert _poisoned_seqs(rig) == [bad.seq, reader.seq, reader2.seq]   # ... and are poisoned too


def test_poisoned_spans_apply_only_to_commands_queued_before_the_host_collected_them(rig):
    fw = rig.ep(0).firmware
    ring = rig.ep(0).create_ring()
    rig.submit(ring, _bad_add(rig, rig.dev(0, 16), rig.dev(1024, 16)), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    assert fw.poison_ranges
    fw.take_poisoned_writes()         # the host knows now (it checks later launches itself) ...
    assert not fw.poison_ranges       # ... and every queued command was checked: the spans go
    rig.submit(ring, rig.launch("binary", ("add", rig.dev(256, 16), rig.dev(0, 16), rig.dev(0, 16), F32, 1)),
               rig.signal(1, 2))
    rig.run_until_sem(1, 2)
    assert fw.take_poisoned_writes() == [] and len(rig.errors(0)) == 1


def test_a_pure_write_covering_a_poisoned_span_makes_it_valid(rig):
    ring = rig.ep(0).create_ring()
    rig.submit(ring, _bad_add(rig, rig.dev(0, 16), rig.dev(1024, 16)), rig.fill(rig.dev(0, 16), 3.0),
               rig.launch("binary", ("add", rig.dev(256, 16), rig.dev(0, 16), rig.dev(0, 16), F32, 1)),
               rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    assert (rig.hbm(0, 256, 64, np.float32) == 6.0).all()
    assert not rig.ep(0).firmware.poison_ranges


# -- ordering and time -----------------------------------------------------------

def test_wait_across_two_rings_orders_work(rig):
    ep = rig.ep(0)
    consumer, producer = ep.create_ring(), ep.create_ring()
    n = 4096
    # The consumer is submitted first and would copy zeros without its WAIT.
    rig.submit(consumer, rig.wait(0, 5, 1), rig.copy(rig.dev(65536, n), rig.dev(0, n)), rig.signal(6, 1))
    rig.submit(producer, rig.fill(rig.dev(0, n), 42.0), rig.signal(5, 1), submit_ns=10_000.0)
    rig.run_until_sem(6, 1)
    assert (rig.hbm(0, 65536, 4 * n, np.float32) == 42.0).all()
    trace = {e.name: e for e in rig.trace(0)}
    assert trace["memcpy_d2d"].start_ns >= trace["fill"].end_ns >= 10_000
    assert ep.semaphore_time_ns(6) > ep.semaphore_time_ns(5)


def test_wait_on_another_devices_semaphore(rig):
    r0, r1 = rig.ep(0).create_ring(), rig.ep(1).create_ring()
    rig.submit(r0, rig.wait(1, 9, 1), rig.signal(4, 1))
    rig.submit(r1, rig.signal(9, 1), device=1, submit_ns=20_000.0)
    t = rig.run_until_sem(4, 1, device=0)
    assert rig.ep(1).semaphore_time_ns(9) >= 20_000
    assert t >= rig.ep(1).semaphore_time_ns(9)
    assert rig.ep(0).semaphore_value(9) == 0  # semaphores are per device


def test_commands_of_a_ring_run_in_order(rig):
    ring = rig.ep(0).create_ring()
    commands = [rig.fill(rig.dev(0, 1024), float(i)) for i in range(5)]
    rig.submit(ring, *commands, rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    trace = rig.trace(0)
    assert [e.seq for e in trace] == [c.seq for c in commands]
    assert all(a.end_ns <= b.start_ns for a, b in zip(trace, trace[1:]))
    assert (rig.hbm(0, 0, 4096, np.float32) == 4.0).all()  # the last fill wins


def test_two_rings_run_concurrently(rig):
    ep = rig.ep(0)
    r1, r2 = ep.create_ring(), ep.create_ring()
    n = 1 << 16
    rig.submit(r1, rig.copy(rig.dev(0, n), rig.dev(1 << 20, n)), rig.signal(1, 1))
    rig.submit(r2, rig.copy(rig.dev(2 << 20, n), rig.dev(3 << 20, n)), rig.signal(2, 1))
    rig.run_until_sem(1, 1)
    rig.run_until_sem(2, 1)
    a, b = rig.trace(0)
    assert a.ring != b.ring
    assert a.start_ns < b.end_ns and b.start_ns < a.end_ns  # the two DMA copies overlap in time


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_modelled_time_grows_with_bytes(rig, direction):
    ring = rig.ep(0).create_ring()
    host = np.zeros(1 << 18, np.float32)                 # 1 MiB
    small, large = 256, 1 << 18                          # 1 KiB and 1 MiB of float32
    for n in (small, large):
        h = rig.host(host[:n])
        d = rig.dev(0, n)
        rig.submit(ring, rig.copy(d, h) if direction == "h2d" else rig.copy(h, d))
    rig.submit(ring, rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    small_entry, large_entry = rig.trace(0)
    assert (small_entry.nbytes, large_entry.nbytes) == (1024, 1 << 20)
    small_ns = small_entry.end_ns - small_entry.start_ns
    large_ns = large_entry.end_ns - large_entry.start_ns
    assert large_ns > small_ns
    # 1023 KiB more over a 32 GB/s link is about 32.7 us more.
    link = rig.platform.config.host_link.bandwidth_gb_per_s
    assert large_ns - small_ns == pytest.approx(((1 << 20) - 1024) / link)


def test_commands_do_not_start_before_their_submit_time(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    rig.submit(ring, rig.fill(rig.dev(0, 16), 1.0), submit_ns=50_000.0)
    rig.submit(ring, rig.fill(rig.dev(64, 16), 2.0), rig.signal(1, 1), submit_ns=10.0)
    t = rig.run_until_sem(1, 1)
    first, second = rig.trace(0)
    assert first.start_ns >= 50_000.0
    assert second.start_ns >= first.end_ns  # an earlier submit time does not overtake the ring order
    assert t >= second.end_ns


def test_simulation_waits_for_the_host_to_advance_it(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    rig.submit(ring, rig.fill(rig.dev(0, 16), 1.0), rig.signal(1, 1))
    assert rig.platform.now_ns() == 0
    assert (rig.hbm(0, 0, 64, np.float32) == 0).all()
    rig.run_until_sem(1, 1)
    assert rig.platform.now_ns() > 0


# A command does nothing (not even fault) before its submit time plus decode, and an engine
# is booked only by commands that are ready.


def test_fault_is_not_raised_before_the_command_was_submitted(rig):
    ring = rig.ep(0).create_ring()
    src = np.ones(16, np.float32)
    rig.submit(ring, rig.copy(rig.dev(rig.MAPPED, 16), rig.host(src)), rig.signal(1, 1), submit_ns=50_000.0)
    rig.run_until_sem(1, 1)
    (record,) = rig.errors(0)
    assert record.sim_time_ns >= 50_000.0


def test_a_later_fault_does_not_abort_earlier_work_of_the_context(rig):
    ep = rig.ep(0)
    faulting, worker = ep.create_ring(), ep.create_ring()
    n = 1 << 18
    # The worker ring's fill runs at about 11 us; the other ring's fault happens at 50 us.
    rig.submit(worker, rig.copy(rig.dev(1 << 20, n), rig.dev(2 << 20, n)), rig.fill(rig.dev(0, 16), 2.0),
               rig.signal(2, 1))
    rig.submit(faulting, rig.copy(rig.dev(rig.MAPPED, 16), rig.host(np.ones(16, np.float32))), rig.signal(1, 1),
               submit_ns=50_000.0)
    rig.run_until_sem(1, 1)
    rig.run_until_sem(2, 1)
    assert len(rig.errors(0)) == 1
    assert ep.semaphore_time_ns(2) < 50_000.0
    assert (rig.hbm(0, 0, 64, np.float32) == 2.0).all()


def test_idle_engine_serves_the_command_that_is_ready_first(rig):
    ep = rig.ep(0)
    later, sooner = ep.create_ring(), ep.create_ring()
    n = 1 << 18
    rig.submit(later, rig.fill(rig.dev(0, 16), 1.0), rig.signal(1, 1), submit_ns=20_000.0)
    # A ~11 us DMA copy, then a fill on the vector engine, idle until the other ring's fill at 20 us.
    rig.submit(sooner, rig.copy(rig.dev(1 << 20, n), rig.dev(2 << 20, n)), rig.fill(rig.dev(4096, 16), 2.0),
               rig.signal(2, 1))
    rig.run_until_sem(1, 1)
    rig.run_until_sem(2, 1)
    fills = {e.ring: e for e in rig.trace(0) if e.name == "fill"}
    copy = next(e for e in rig.trace(0) if e.name == "memcpy_d2d")
    assert copy.end_ns < 20_000.0
    assert fills[sooner].start_ns < 20_000.0
    assert fills[sooner].end_ns <= fills[later].start_ns
