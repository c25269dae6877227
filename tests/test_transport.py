"""The device boundary is a transport (DESIGN.md): beyond imports, the runtime and the driver hold
no path to the simulation's objects, and every transport call answers with plain values."""
import ast
import inspect
from pathlib import Path

import numpy as np
import simpy

import runtime
from firmware.transport import DeviceTransport, HostTransport
from runtime import TensorRef

ROOT = Path(__file__).resolve().parents[1]
# Attributes that only the emulated system has: reaching for one from runtime/ or driver/ goes
# around the transport.
SIMULATION_ATTRIBUTES = {"env", "system", "platform", "endpoints", "firmware", "run_until", "run_all",
                         "run_to_time", "step", "process", "timeout", "succeed", "processed",
                         "semaphore_event", "ring_space_event"}
PLAIN = (type(None), bool, int, float, str, bytes)


def _attribute_names(layer: str):
    for path in sorted((ROOT / layer).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                yield str(path.relative_to(ROOT)), node.lineno, node.attr


def test_runtime_and_driver_name_no_simulation_attribute():
    found = [(f, line, attr) for layer in ("runtime", "driver") for f, line, attr in _attribute_names(layer)
             if attr in SIMULATION_ATTRIBUTES]
    assert found == []


def _reachable(root, stop_types):
    """Every object reachable from ``root`` through attributes and containers, not entering the
    transport (``stop_types``): what the runtime and driver hold on their own side."""
    seen, stack, out = set(), [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, PLAIN) or inspect.ismodule(obj) or inspect.isclass(obj) \
                or inspect.isroutine(obj):
            continue
        seen.add(id(obj))
        out.append(obj)
        if isinstance(obj, stop_types):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            stack.extend(getattr(obj, "__dict__", {}).values())
            for name in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, name):
                    stack.append(getattr(obj, name))
    return out


def _exercise(rt):
    """Some of everything: allocation, copies both ways, a launch, streams, events, a recovery."""
    n = 256
    host = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    a = rt.malloc(0, host.nbytes)
    ref = TensorRef(False, 0, a, 8, (n,), (1,))
    side = rt.stream_create(0)
    rt.memcpy(ref, TensorRef(True, -1, host.ctypes.data, 8, (n,), (1,)), rt.stream(0))
    start, end = rt.event_create(0, enable_timing=True), rt.event_create(0, enable_timing=True)
    rt.event_record(start, rt.stream(0))
    rt.launch("binary", ("add", ref, ref, ref, 8, 1.0), rt.stream(0))
    rt.event_record(end, rt.stream(0))
    rt.stream_wait_event(side, end)
    rt.memcpy(TensorRef(True, -1, out.ctypes.data, 8, (n,), (1,)), ref, side)
    side.query()
    rt.device_synchronize(0)
    assert rt.event_elapsed_ms(start, end) > 0
    np.testing.assert_array_equal(out, 2 * host)
    rt.free(0, a)
    rt.empty_cache(0)
    rt.recover(0, "test")
    rt.telemetry(0)


def test_no_attribute_path_from_runtime_or_driver_reaches_the_simulation():
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    _exercise(rt)
    held = _reachable(rt, (DeviceTransport, HostTransport))
    transports = [o for o in held if isinstance(o, (DeviceTransport, HostTransport))]
    assert transports, "the walk must meet the transport (or this test checks nothing)"
    leaks = [type(o) for o in held if type(o).__module__.split(".")[0] in ("simpy", "emulator")
             and not type(o).__module__.startswith("emulator.config")]
    assert leaks == []


def _assert_plain(value, where):
    if isinstance(value, PLAIN):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _assert_plain(k, where)
            _assert_plain(v, where)
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            _assert_plain(v, where)
        return
    module = type(value).__module__
    assert not module.startswith("simpy") and (not module.startswith("emulator") or
                                               module.startswith("emulator.config")), \
        f"{where} returned a {type(value).__module__}.{type(value).__name__}"
    for v in getattr(value, "__dict__", {}).values():
        _assert_plain(v, where)
    for name in getattr(type(value), "__slots__", ()):
        _assert_plain(getattr(value, name, None), where)


class _Checked:
    """Wraps a transport object: every method's answer must be plain values."""

    def __init__(self, inner, calls):
        self._inner, self._calls = inner, calls

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            _assert_plain(attr, name)
            return attr

        def call(*args, **kwargs):
            result = attr(*args, **kwargs)
            self._calls.append(name)
            _assert_plain(result, name)
            return result
        return call


def test_every_transport_call_returns_plain_values(monkeypatch):
    import driver.driver as driver_module

    calls = []
    real = driver_module.Platform

    class CheckedPlatform(_Checked):
        def __init__(self, config, mode="functional"):
            inner = real(config, mode=mode)
            super().__init__(inner, calls)
            self.devices = [_Checked(d, calls) for d in inner.devices]

    monkeypatch.setattr(driver_module, "Platform", CheckedPlatform)
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    _exercise(rt)
    for name in ("load_firmware", "create_ring", "submit", "wait_semaphore", "semaphore_value",
                 "semaphore_time_ns", "map_pages", "unmap_pages", "advance_to", "drain", "telemetry"):
        assert name in calls, name
    assert simpy  # the simulation library is what must stay behind the transport
