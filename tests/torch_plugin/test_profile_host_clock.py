"""Modelled host time (runtime/host_clock.py): launch overhead, synchronisation, ring back-pressure
and interrupt servicing are separate terms, and interrupts are charged to the host."""
import pytest

from runtime.host_clock import BACKPRESSURE, SYNC, HostClock


def clock(**kwargs):
    return HostClock(api_call_ns=100.0, interrupt_ns=50.0, **kwargs)


def test_api_calls_are_the_launch_overhead():
    c = clock()
    for _ in range(3):
        c.charge_call()
    assert c.now_ns == 300.0 and c.api_calls == 3 and c.api_ns == 300.0


def test_waits_are_kept_by_cause():
    c = clock()
    c.wait_until(1000.0, SYNC)
    c.wait_until(1500.0, BACKPRESSURE)
    c.wait_until(1200.0, SYNC)            # already past: counted, costs nothing
    assert c.now_ns == 1500.0
    assert (c.sync_waits, c.sync_wait_ns) == (2, 1000.0)
    assert (c.backpressure_waits, c.backpressure_wait_ns) == (1, 500.0)
    assert c.waited_ns == 1500.0


def test_an_interrupt_while_the_host_runs_steals_host_time():
    c = clock()
    c.charge_call()                        # host at 100 ns
    c.service_interrupt(40.0)              # raised before the host's present: the handler preempts it
    assert c.now_ns == 150.0 and c.interrupts == 1 and c.interrupt_stolen_ns == 50.0


def test_an_interrupt_while_the_host_waits_costs_nothing_extra():
    c = clock()
    c.service_interrupt(800.0)             # the host is blocked (its clock is behind the device)
    c.wait_until(1000.0)
    assert c.now_ns == 1000.0 and c.interrupts == 1 and c.interrupt_stolen_ns == 0.0


def test_snapshot_lists_every_term():
    c = clock()
    c.charge_call()
    c.charge_host_work(1e3, 1e3)
    snap = c.snapshot()
    for key in ("now_ns", "api_calls", "api_ns", "sync_wait_ns", "backpressure_wait_ns", "interrupts",
                "interrupt_stolen_ns", "host_work_ns", "host_work_flops", "host_work_bytes"):
        assert key in snap
    assert snap["host_work_flops"] == 1e3 and snap["now_ns"] == pytest.approx(100.0 + c.host_work_ns)


def test_the_runtime_charges_interrupts_to_its_clock():
    import numpy as np

    import runtime
    rt = runtime.get_runtime()
    data = np.ones(1024, np.float32)
    dev = rt.malloc(0, data.nbytes)
    ref = runtime.TensorRef(False, 0, dev, 8, (1024,), (1,))
    stream = rt.stream(0)
    before = rt.clock.interrupts
    rt.memcpy(ref, runtime.TensorRef(True, -1, data.ctypes.data, 8, (1024,), (1,)), stream)
    rt.stream_synchronize(stream)          # a fence signal: one completion interrupt
    assert rt.clock.interrupts > before
    rt.free(0, dev)
