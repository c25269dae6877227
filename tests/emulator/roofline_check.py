"""A pytest plugin that checks the roofline invariant on every kernel launch decoded while the
tests run: projected time >= max(FLOPs / peak of its engine, bytes / sustained HBM bandwidth).

    python -m pytest tests/torch_plugin/test_opinfo.py -p roofline_check  (with tests/emulator on
    the path: ``PYTHONPATH=tests/emulator``)

At the end it prints the kernels checked and fails the session if any launch broke the bound.
"""
from __future__ import annotations

import pytest

from emulator.kernels import dtypes
from firmware import scheduler

checked: dict = {}
violations: list = []


def check(device, name, cost, operands):
    out = next((o for o in operands if hasattr(o, "dtype") and hasattr(o, "strides")), None)
    dtype = dtypes.NAMES.get(out.dtype, "float32") if out is not None else "float32"
    engine = scheduler.KERNELS[name].engine
    cfg = device.config
    try:
        peak = cfg.peak_flops(engine, dtype) / 1e9
    except ValueError:
        peak = cfg.peak_flops(engine, "float32") / 1e9
    floor = max(cost.flops / peak, cost.nbytes / (cfg.hbm_bytes_per_s / 1e9))
    checked[name] = checked.get(name, 0) + 1
    if cost.ns < floor * (1 - 1e-9):
        violations.append((name, dtype, cost.ns, floor, cost.flops, cost.nbytes))


def pytest_configure(config):
    original = scheduler.FirmwareInstance._decode_launch

    def decode(self, name, args, generation):
        decoded = original(self, name, args, generation)
        _, _, _, _, _, operands, ns, nbytes, flops, _, _, static = decoded
        from emulator.kernels.library import Cost
        check(self.device, name, Cost(ns, nbytes, flops), operands)
        return decoded

    scheduler.FirmwareInstance._decode_launch = decode


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"roofline check: {sum(checked.values())} launches of {len(checked)} kernels")
    for v in violations[:50]:
        terminalreporter.write_line(f"  VIOLATION {v}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if violations:
        session.exitstatus = 1
