"""Modelled host time of host work (runtime/host_clock.py, Runtime.charge_host_work).

The cost model: overhead_ns + max(flops / flops_per_s, nbytes / memory_bandwidth_gb_per_s),
hand-computed below (GB/s is bytes per ns).
"""
import pytest

from emulator import config as C
from emulator.errors import ConfigError
from runtime.host_clock import HostClock
from runtime.report import format_report


def test_host_work_cost_is_overhead_plus_the_slower_of_compute_and_memory():
    clock = HostClock(api_call_ns=7.0, flops_per_s=1e9, memory_bandwidth_gb_per_s=2.0, overhead_ns=100.0)
    # memory-bound: 1000 flops = 1000 ns at 1 GFLOP/s; 4000 B = 2000 ns at 2 GB/s
    assert clock.charge_host_work(1000, 4000) == 100.0 + 2000.0
    # compute-bound: 10_000 flops = 10_000 ns; 0 bytes
    assert clock.charge_host_work(10_000, 0) == 100.0 + 10_000.0
    # nothing to do still costs the overhead
    assert clock.charge_host_work(0, 0) == 100.0
    assert clock.host_work_calls == 3
    assert clock.host_work_ns == 2100.0 + 10_100.0 + 100.0
    assert clock.now_ns == clock.host_work_ns
    assert clock.api_calls == 0  # host work is not a runtime API call


def test_host_work_moves_the_clock_after_a_wait():
    clock = HostClock(api_call_ns=0.0, flops_per_s=1e9, memory_bandwidth_gb_per_s=1.0, overhead_ns=0.0)
    clock.wait_until(500.0)
    clock.charge_host_work(0, 250)
    assert clock.now_ns == 750.0 and clock.waited_ns == 500.0 and clock.host_work_ns == 250.0


def test_runtime_charges_host_work_with_the_configured_host(rt):
    host = rt.config.host
    assert (host.flops_per_s, host.memory_bandwidth_gb_per_s, host.fallback_overhead_ns) == (100e9, 20.0, 5000.0)
    before, calls = rt.clock.now_ns, rt.clock.api_calls
    # 1e6 flops at 100 GFLOP/s = 10_000 ns; 1e6 B at 20 GB/s = 50_000 ns; + 5000 ns overhead
    assert rt.charge_host_work(1e6, 1e6) == 55_000.0
    # 1e9 flops = 10_000_000 ns; 2000 B = 100 ns
    assert rt.charge_host_work(1e9, 2000) == 5000.0 + 10_000_000.0
    assert rt.clock.now_ns - before == 55_000.0 + 10_005_000.0
    assert rt.clock.host_work_calls == 2 and rt.clock.api_calls == calls


def test_report_shows_host_fallback_time(rt):
    assert "host fallback" not in format_report(rt)
    rt.charge_host_work(1e6, 1e6)
    (line,) = [l for l in format_report(rt).splitlines() if "host fallback:" in l]
    assert "1 ops, 55.0 us of modelled host time" in line


def test_host_cost_fields_are_validated():
    with pytest.raises(ConfigError, match="flops_per_s"):
        C.HostConfig(flops_per_s=0.0)
    with pytest.raises(ConfigError, match="memory_bandwidth_gb_per_s"):
        C.HostConfig(memory_bandwidth_gb_per_s=0.0)
    with pytest.raises(ConfigError, match="fallback_overhead_ns"):
        C.HostConfig(fallback_overhead_ns=-1.0)
    assert C.from_dict({"host": {"flops_per_s": 1e12}}).host.flops_per_s == 1e12


def test_the_interrupt_cost_comes_from_the_hardware_description(tmp_path):
    import runtime
    path = tmp_path / "irq.toml"
    path.write_text('preset = "tiny"\n[host]\ninterrupt_service_ns = 3500.0\n')
    rt = runtime.Runtime(settings=runtime.Settings(config_path=str(path)))
    assert rt.clock.interrupt_ns == 3500.0
    assert runtime.Runtime(settings=runtime.Settings(preset="tiny")).clock.interrupt_ns == 1000.0


# -- the breakdown adds up ---------------------------------------------------------------

def _dev(address, n):
    from driver import TensorRef
    from emulator.kernels import dtypes
    return TensorRef(False, 0, address, dtypes.FLOAT32, (n,), (1,))


def test_every_charged_nanosecond_is_in_one_cause(rt):
    """API calls, cached allocations, command encodes (api_ns), waits, stolen interrupts and host
    work sum to the host clock: the report's by-cause breakdown and its verdict miss nothing."""
    host = rt.config.host
    assert host.cached_alloc_ns > 0 and host.command_encode_ns > 0
    clock = rt.clock
    a = rt.malloc(0, 4096)                       # a new segment: a driver call
    b = rt.malloc(0, 4096)                       # from the cached segment
    assert clock.api_calls == 1 and clock.cached_allocs == 1
    assert clock.cached_alloc_total_ns == host.cached_alloc_ns
    for _ in range(3):
        rt.memset(_dev(a, 1024), 1.0, rt.stream(0))
    clock.charge_encode(5)                       # a replayed program's five commands
    assert clock.encode_ns == 5 * host.command_encode_ns and clock.encoded_commands == 5
    rt.charge_host_work(1e6, 1e6)
    rt.stream(0).synchronize()
    rt.free(0, b)
    assert clock.sync_waits >= 1
    assert clock.api_ns == clock.call_ns + clock.cached_alloc_total_ns + clock.encode_ns
    assert clock.call_ns == clock.api_calls * host.api_call_ns
    total = clock.api_ns + clock.waited_ns + clock.interrupt_stolen_ns + clock.host_work_ns
    assert clock.now_ns == pytest.approx(total, rel=1e-12)
    (line,) = [l for l in format_report(rt).splitlines() if "host time by cause" in l]
    assert f"{clock.api_ns / 1e3:.1f} us launch overhead" in line and "1 cached allocations" in line
    assert "5 commands encoded" in line


def test_cached_alloc_and_encode_fields_are_validated():
    with pytest.raises(ConfigError, match="cached_alloc_ns"):
        C.HostConfig(cached_alloc_ns=-1.0)
    with pytest.raises(ConfigError, match="command_encode_ns"):
        C.HostConfig(command_encode_ns=-1.0)
