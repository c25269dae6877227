"""Power modes and energy (emulator/power.py, [device.power] in emulator/config.py, the firmware's
trace records, the profiler's report and trace; docs/hardware.md "Power and energy")."""
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from cost_helpers import BF16, F32, op, system
from emulator import config as C
from emulator.device import CostDevice
from emulator.errors import ConfigError
from emulator.kernels.library import KERNELS
from emulator.power import PowerManagement, clock_grid
from test_cost_model import Rig

PJ = 1e-12
DOC = Path(__file__).resolve().parents[2] / "docs" / "hardware.md"


def with_mode(cfg, mode):
    power = dataclasses.replace(cfg.device.power, default_mode=mode)
    return dataclasses.replace(cfg, device=dataclasses.replace(cfg.device, power=power))


def gemm_operands(n, dtype=BF16):
    return (op(dtype, n, n), op(dtype, n, n), op(dtype, n, n), None, 0.0, 1.0)


def add_operands(n, dtype=F32):
    return ("add", op(dtype, n), op(dtype, n), op(dtype, n), dtype, 1.0)


def decide(device_config, kernel, operands, mac_dtype="", mode=None):
    pm = PowerManagement(device_config, mode=mode)
    cost = KERNELS[kernel].cost(CostDevice(device_config), *operands)
    kp = pm.kernel(KERNELS[kernel], operands, cost, mac_dtype)
    watts = kp.dynamic_j / (kp.cost.ns * 1e-9) + kp.static_w
    return cost, kp, watts, pm


# -- the description ---------------------------------------------------------------------------

@pytest.mark.parametrize("power, field", [
    ({"static_w": -1.0}, "device.power.static_w"),
    ({"hbm_pj_per_byte": float("nan")}, "device.power.hbm_pj_per_byte"),
    ({"mac_pj": {"bfloat16": -0.1}}, "device.power.mac_pj.bfloat16"),
    ({"mac_pj": {"float4": 0.1}}, "device.power.mac_pj.float4"),
    ({"default_mode": "turbo"}, "device.power.default_mode"),
    ({"modes": {"max": {"clocks_ghz": [1.0, 1.2], "voltages_v": [1.0, 1.0]}}}, "device.power.modes.max.clocks_ghz"),
    ({"modes": {"max": {"clocks_ghz": [1.2, 1.0], "voltages_v": [1.0]}}}, "device.power.modes.max.voltages_v"),
    ({"modes": {"max": {"clocks_ghz": [1.2, 1.0], "voltages_v": [0.8, 0.9]}}}, "device.power.modes.max.voltages_v"),
    ({"modes": {"max": {"clocks_ghz": [1.2], "voltages_v": ["high"]}}}, "device.power.modes.max.voltages_v"),
    ({"modes": {"max": {"power_cap_w": 0.0}}}, "device.power.modes.max.power_cap_w"),
    ({"modes": {"max": {"boost": True}}}, "device.power.modes.max.boost"),
])
def test_bad_power_fields_name_the_field(power, field):
    with pytest.raises(ConfigError) as info:
        C.from_dict({"device": {"clock_ghz": 1.4, "power": power}})
    assert str(info.value).startswith(field + ":"), str(info.value)


def test_power_tables_round_trip_and_presets_have_two_modes():
    for name in ("default", "tiny", "h200", "h100", "h200x8"):
        cfg = C.load_preset(name)
        assert C.from_dict(C.describe(cfg)) == cfg
        assert set(cfg.device.power.mode_names) >= {"max", "efficiency"}, name
        assert cfg.device.power.default_mode == "max"
        top = clock_grid(cfg.device, cfg.device.power.mode("max"))[0]
        assert top == (cfg.device.clock_ghz, cfg.device.power.nominal_voltage_v), name


def test_mode_fields_are_documented_with_their_units():
    text = DOC.read_text()
    for f in dataclasses.fields(C.PowerModeConfig):
        row = re.search(rf"\| `device\.power\.modes\.<name>\.{f.name}` \| ([^|]*) \|", text)
        assert row, f.name
        assert row.group(1).strip() == (f.metadata["unit"] or "—"), f.name
    assert "## Power and energy" in text


def test_h200_mac_energies_are_the_tdp_at_each_dense_peak():
    dev = C.load_preset("h200").device
    p = dev.power
    assert p.tdp_w == 700.0 and p.modes[0].power_cap_w == 700.0
    assert 3.9 * 8 <= p.hbm_pj_per_byte <= 5.0 * 8       # HBM3e, 3.9-5 pJ/bit
    for field, dtype in (("bfloat16",) * 2, ("float16",) * 2, ("float32",) * 2, ("float64",) * 2,
                         ("int8",) * 2, ("float8", "float8_e4m3fn")):
        macs_per_s = dev.peak_flops("matrix", dtype) / 2
        assert getattr(p.mac_pj, field) * PJ * macs_per_s == pytest.approx(p.tdp_w - p.static_w, rel=1e-3), field


def test_the_clock_grid_steps_down_the_curve():
    dev = C.load_preset("h200").device
    grid = clock_grid(dev, dev.power.mode("max"))
    assert grid[0] == (1.98, 1.0) and grid[-1] == (0.6, 0.65)
    steps = {round(a[0] - b[0], 6) for a, b in zip(grid, grid[1:])}
    assert steps == {0.015}
    assert all(a[1] >= b[1] for a, b in zip(grid, grid[1:]))
    assert dict(grid)[1.59] == pytest.approx(0.88)


# -- the cap on h200 -----------------------------------------------------------------------------

def test_a_sustained_bf16_gemm_sits_at_the_h200_tdp():
    dev = C.load_preset("h200").device
    cost, kp, watts, _ = decide(dev, "matmul", gemm_operands(8192), "bfloat16")
    assert abs(watts - dev.power.tdp_w) <= 0.1 * dev.power.tdp_w, watts
    assert watts <= dev.power.mode().power_cap_w
    # Under the cap: the cost model's own time is kept.
    assert not kp.throttled and kp.clock_ghz == dev.clock_ghz and kp.cost == cost


def test_a_memory_bound_kernel_draws_less_on_h200():
    dev = C.load_preset("h200").device
    cost, kp, watts, _ = decide(dev, "binary", add_operands(1 << 26), "")
    assert cost.bound == "memory" and not kp.throttled
    _, _, gemm_watts, _ = decide(dev, "matmul", gemm_operands(8192), "bfloat16")
    assert watts < 0.6 * gemm_watts, (watts, gemm_watts)
    # Its power is mostly HBM's and static: the HBM term alone is above a third of it.
    assert cost.nbytes * dev.power.hbm_pj_per_byte * PJ / (cost.ns * 1e-9) > watts / 3


def test_a_lower_power_mode_throttles_the_gemm_and_stretches_its_time():
    dev = C.load_preset("h200").device
    cap = dev.power.mode("efficiency").power_cap_w
    cost, kp, watts, pm = decide(dev, "matmul", gemm_operands(8192), "bfloat16", mode="efficiency")
    assert kp.throttled and kp.clock_ghz < dev.clock_ghz
    assert watts <= cap
    # The highest clock that fits: one step up would exceed the cap.
    up = next(i for i, (f, _) in enumerate(pm.grid) if f == kp.clock_ghz) - 1
    f_up, v_up = pm.grid[up]
    slower = dataclasses.replace(dev, clock_ghz=f_up, power=C.PowerConfig())
    ops = gemm_operands(8192)
    c_up = KERNELS["matmul"].cost(CostDevice(slower), *ops)
    core = (cost.flops / 2 * dev.power.mac_pj.bfloat16 + cost.cache_bytes * dev.power.onchip_pj_per_byte) * PJ
    dyn_up = core * (v_up / dev.power.nominal_voltage_v) ** 2 + cost.nbytes * dev.power.hbm_pj_per_byte * PJ
    assert dyn_up / (c_up.ns * 1e-9) + pm.static_w(v_up) > cap
    # A compute-bound kernel stretches with the clock (at most by the clock ratio).
    ratio = kp.cost.ns / cost.ns
    assert 1.0 < ratio <= dev.clock_ghz / kp.clock_ghz + 1e-9
    assert ratio == pytest.approx(dev.clock_ghz / kp.clock_ghz, rel=0.05)
    # Energy per MAC falls with V^2: the throttled GEMM's dynamic energy is below the top clock's.
    _, top, _, _ = decide(dev, "matmul", gemm_operands(8192), "bfloat16")
    assert kp.dynamic_j < top.dynamic_j


# -- the firmware's accounting (tiny) --------------------------------------------------------------

def tiny_rig(mode="max"):
    return Rig(with_mode(system("tiny"), mode))


def run_gemm(rig, n=512):
    a = rig.dev(0, (n, n), BF16)
    b = rig.dev(n * n * 2, (n, n), BF16)
    out = rig.dev(2 * n * n * 2, (n, n), BF16)
    rig.run(0, rig.launch("matmul", out, a, b, None, 0.0, 1.0))
    rig.wait(0)
    (entry,) = [e for e in rig.platform.endpoints[0].firmware.trace if e.name == "matmul"]
    return entry, gemm_operands(n)   # the same shapes, distinct addresses: the same cost


def test_a_kernels_energy_is_the_sum_of_its_terms():
    rig = tiny_rig()
    entry, ops = run_gemm(rig)
    dev = rig.config.device
    p = dev.power
    cost = KERNELS["matmul"].cost(CostDevice(dev), *ops)
    duration = (entry.end_ns - entry.start_ns) * 1e-9
    expected = ((cost.flops / 2 * p.mac_pj.bfloat16 + cost.cache_bytes * p.onchip_pj_per_byte
                 + cost.nbytes * p.hbm_pj_per_byte) * PJ + p.static_w * duration)
    assert entry.energy_j == pytest.approx(expected, rel=1e-9)
    assert entry.static_w == p.static_w and entry.clock_ghz == dev.clock_ghz
    assert entry.end_ns - entry.start_ns == pytest.approx(cost.ns)    # under the cap: unchanged
    stats = rig.platform.endpoints[0].firmware.kernel_stats["matmul"]
    assert stats.energy_j == pytest.approx(entry.energy_j) and stats.throttled == 0


def test_a_vector_kernel_and_a_copy_are_priced_by_their_terms():
    rig = tiny_rig()
    n = 1 << 16
    host = np.ones(n, np.float32)
    rig.run(0, rig.copy(rig.dev(0, (n,)), rig.host(host)),
            rig.launch("binary", "add", rig.dev(4 * n, (n,)), rig.dev(0, (n,)), rig.dev(0, (n,)), F32, 1.0))
    rig.wait(0)
    copy, add = rig.platform.endpoints[0].firmware.trace
    p = rig.config.device.power
    cost = KERNELS["binary"].cost(CostDevice(rig.config.device), "add", op(F32, n), op(F32, n), op(F32, n), F32, 1.0)
    # x + x reads x once (emulator/memory.py): the firmware's bytes, not a three-operand cost's
    assert add.nbytes == 2 * 4 * n and add.flops == cost.flops
    dynamic = (add.flops * p.vector_op_pj + add.nbytes * p.onchip_pj_per_byte + add.nbytes * p.hbm_pj_per_byte) * PJ
    assert add.energy_j == pytest.approx(dynamic + p.static_w * (add.end_ns - add.start_ns) * 1e-9, rel=1e-9)
    # h2d: the bytes cross the host link and are written to HBM
    copy_dynamic = 4 * n * (p.host_link_pj_per_byte + p.hbm_pj_per_byte) * PJ
    assert copy.energy_j == pytest.approx(copy_dynamic + p.static_w * (copy.end_ns - copy.start_ns) * 1e-9,
                                          rel=1e-9)


def test_the_efficiency_mode_throttles_on_the_firmware_path():
    fast, _ = run_gemm(tiny_rig("max"), 1024)
    slow_rig = tiny_rig("efficiency")
    slow, _ = run_gemm(slow_rig, 1024)
    cap = slow_rig.config.device.power.mode("efficiency").power_cap_w
    assert slow.clock_ghz < fast.clock_ghz == 1.0
    assert slow.end_ns - slow.start_ns > fast.end_ns - fast.start_ns
    assert slow.energy_j / ((slow.end_ns - slow.start_ns) * 1e-9) <= cap
    assert fast.energy_j / ((fast.end_ns - fast.start_ns) * 1e-9) > cap
    assert slow_rig.platform.endpoints[0].firmware.kernel_stats["matmul"].throttled == 1
    # The power track of the throttled run stays under the cap (its static power at the lower voltage).
    from runtime.report import energy_summary, power_track
    entries = list(slow_rig.platform.endpoints[0].firmware.trace)
    (track,) = power_track(entries, slow_rig.config, 0.0, slow.end_ns).values()
    assert max(w for _, w in track) <= cap
    summary = energy_summary(entries, slow_rig.config, 0.0, slow.end_ns)
    assert summary["throttled_commands"] == 1 and summary["power_mode"] == "efficiency"
    assert summary["peak_power_w"] == pytest.approx(slow.energy_j / ((slow.end_ns - slow.start_ns) * 1e-9))


def test_emu_power_mode_selects_the_mode():
    from runtime.errors import InvalidValueError
    from runtime.settings import Settings
    env = {"EMU_PRESET": "h200", "EMU_POWER_MODE": "efficiency"}
    assert Settings.from_environment(env).load_config().device.power.default_mode == "efficiency"
    env["EMU_POWER_MODE"] = "default"
    assert Settings.from_environment(env).load_config().device.power.default_mode == "max"
    env["EMU_POWER_MODE"] = "turbo"
    with pytest.raises(InvalidValueError, match="EMU_POWER_MODE='turbo'.*modes: max, efficiency"):
        Settings.from_environment(env).load_config()


# -- the profiler ------------------------------------------------------------------------------------

def test_the_profile_report_and_trace_carry_energy_and_power(tmp_path):
    import json

    import torch
    x = torch.randn(256, 256).to("emu")
    w = torch.randn(256, 256).to("emu")
    with torch.emu.profile() as prof:
        (x @ w).relu().sum().item()
    report = prof.report()
    d = report.as_dict()
    import runtime
    config = runtime.get_runtime().config
    static = config.device.power.static_w
    assert d["energy_j"] == report.energy_j > 0
    assert d["power_mode"] == "max" and d["power_cap_w"] == config.device.power.mode().power_cap_w
    assert static < d["average_power_w"] <= d["peak_power_w"] <= d["power_cap_w"]
    assert d["average_power_w"] == pytest.approx(d["energy_j"] / report.projected_total_time_s, rel=1e-6)
    rows = [r for r in report.ops if r.path != "host_fallback"]
    (mm,) = [r for r in rows if r.op == "aten::mm"]
    assert mm.energy_j > 0 and mm.throttled is False and d["throttled_commands"] == 0
    # Each row's energy is its commands' (dynamic + static while they ran); the total adds static
    # power over the idle time too.
    assert sum(r.energy_j for r in rows) <= report.energy_j
    assert "energy uJ" in report.table() and "energy:" in report.table()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "power (W)"]
    assert counters and all(e["args"]["W"] >= static - 1e-3 for e in counters)
    assert max(e["args"]["W"] for e in counters) == pytest.approx(d["peak_power_w"], abs=1e-3)
    # The track integrates to the report's energy (one device in use).
    ts = [e["ts"] for e in counters]
    area = sum(c["args"]["W"] * (t1 - t0) * 1e-6 for c, t0, t1 in zip(counters, ts, ts[1:]))
    assert area == pytest.approx(d["energy_j"], rel=1e-3)


def test_the_whole_run_timeline_and_report_carry_energy(tmp_path):
    import json

    import torch
    x = torch.randn(128, 128).to("emu")
    (x @ x).sum().item()
    path = tmp_path / "timeline.json"
    torch.emu.export_timeline(path)
    events = json.loads(path.read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "power (W)"]
    assert counters and max(e["args"]["W"] for e in counters) > min(e["args"]["W"] for e in counters)
    text = torch.emu.performance_report()
    assert "energy uJ" in text and re.search(r"emu:0 energy: [0-9.e+-]+ J in its commands \(power mode max", text)


def test_a_lower_device_clock_cuts_the_inherited_modes_curve_there():
    from emulator import power
    cfg = system("default", device={"clock_ghz": 1.0}).device   # the preset's modes start above 1.0 GHz
    for mode in cfg.power.modes:
        grid = power.clock_grid(cfg, mode)
        assert grid[0][0] == pytest.approx(1.0)
        assert all(f <= 1.0 + 1e-9 for f, _ in grid)
        original = mode.clocks_ghz
        if original and original[0] > 1.0:
            assert grid[0][1] == pytest.approx(power.voltage_at(original, mode.voltages_v, 1.0))
