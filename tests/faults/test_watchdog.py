"""Hangs and cyclic waits are reported within the configured watchdog timeout (simulated time),
and never hang the test: each scenario runs in a daemon thread the test joins with a wall-clock
limit, so a regression fails the test instead of blocking it."""
import threading

import numpy as np
import pytest

import runtime
from runtime import ErrorCode

from fault_helpers import dev, host, upload

N = 256
WALL_LIMIT_S = 60


def bounded(fn):
    """Runs ``fn`` in a daemon thread; fails if it does not finish within WALL_LIMIT_S."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as err:  # re-raised in the test's thread
            box["error"] = err
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(WALL_LIMIT_S)
    assert not thread.is_alive(), f"still running after {WALL_LIMIT_S} s: the host hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("kind,code", [("engine_hang", ErrorCode.ENGINE_HANG),
                                       ("firmware_crash", ErrorCode.HEARTBEAT_LOST)])
def test_hang_is_caught_by_the_watchdog_within_the_timeout(rt, kind, code):
    watchdog = rt.config.device.watchdog
    a = upload(rt, 0, np.ones(N))
    rt.inject_fault(0, kind, engine="vector", after_commands=0)
    rt.launch("fill", (dev(0, a, N), 2.0), rt.stream(0))

    def sync():
        with pytest.raises(runtime.DeviceNeedsResetError) as info:
            rt.stream(0).synchronize()
        return info.value
    err = bounded(sync)
    assert err.code == code
    record = err.__cause__.record
    fired = [e for e in rt.error_log(0)["events"] if e["kind"] == kind][-1]
    delay = record.sim_time_ns - fired["sim_time_ns"]
    # caught within the timeout (a lost heartbeat: at the watchdog check after the timeout expired)
    limit = watchdog.timeout_ns + (watchdog.heartbeat_ns if kind == "firmware_crash" else 0)
    assert 0 < delay <= limit, (delay, limit)
    health = rt.health(0)
    assert health["needs_reset"]
    bounded(lambda: rt.reset_device(0, kind))
    b = upload(rt, 0, np.full(N, 3.0))
    assert rt.health(0)["firmware_alive"]
    out = np.zeros(N, np.float32)
    rt.memcpy(host(out), dev(0, b, N), rt.stream(0), blocking=True)
    assert (out == 3).all()


def test_dma_timeout_is_reported_after_the_timeout(rt):
    watchdog = rt.config.device.watchdog
    a = upload(rt, 0, np.ones(N))
    rt.inject_fault(0, "dma_timeout", engine="dma", after_commands=0)
    start = rt.clock.now_ns
    out = np.zeros(N, np.float32)

    def read():
        with pytest.raises(runtime.StreamFaultError) as info:
            rt.memcpy(host(out), dev(0, a, N), rt.stream(0), blocking=True)
        return info.value
    err = bounded(read)
    assert err.code == ErrorCode.DMA_TIMEOUT
    elapsed = rt.clock.now_ns - start
    assert watchdog.timeout_ns <= elapsed <= 2 * watchdog.timeout_ns


def test_cyclic_wait_between_streams_is_detected_not_hung(rt):
    s1, s2 = rt.stream_create(0), rt.stream_create(0)
    drv = rt.driver
    e1, e2 = drv.new_semaphore(0), drv.new_semaphore(0)
    v1, v2 = drv.semaphore_value(0, e1) + 1, drv.semaphore_value(0, e2) + 1
    drv.submit_wait(s1.queue, 0, e2, v2)
    drv.submit_signal(s1.queue, e1, v1)
    drv.submit_wait(s2.queue, 0, e1, v1)
    drv.submit_signal(s2.queue, e2, v2)
    s1.dirty = s2.dirty = True
    start = rt.clock.now_ns

    def sync():
        with pytest.raises(runtime.StreamError) as info:
            s2.synchronize()
        return info.value
    err = bounded(sync)
    assert err.scope == runtime.Scope.STREAM and "can ever signal" in str(err)
    assert rt.clock.now_ns - start <= rt.config.device.watchdog.timeout_ns
    bounded(lambda: rt.reset_device(0, "cyclic wait"))
    bounded(lambda: s1.synchronize())
    bounded(lambda: s2.synchronize())


def test_watchdog_timeout_is_a_hardware_description_field(tmp_path):
    from emulator.config import ConfigError, from_dict
    config = from_dict({"device": {"watchdog": {"timeout_ns": 5000.0, "heartbeat_ns": 500.0}}})
    assert config.device.watchdog.timeout_ns == 5000.0
    with pytest.raises(ConfigError, match="device.watchdog.timeout_ns"):
        from_dict({"device": {"watchdog": {"timeout_ns": 0.0}}})
    path = tmp_path / "fast_watchdog.toml"
    path.write_text('name = "fastdog"\n[device.hbm]\ncapacity_bytes = 67108864\n'
                    '[device.watchdog]\ntimeout_ns = 20000.0\nheartbeat_ns = 1000.0\n')
    rt = runtime.Runtime(settings=runtime.Settings(config_path=str(path)))
    a = upload(rt, 0, np.ones(N))
    rt.inject_fault(0, "engine_hang", engine="vector", after_commands=0)
    rt.launch("fill", (dev(0, a, N), 2.0), rt.stream(0))
    with pytest.raises(runtime.DeviceNeedsResetError) as info:
        bounded(lambda: rt.stream(0).synchronize())
    assert "20000 ns" in str(info.value)
