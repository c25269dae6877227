"""The device's power: each command's energy, and the power management that keeps a power mode's cap.

Energy of a command (``[device.power]``, emulator/config.py; docs/hardware.md "Power and energy"):

- a kernel: its MACs (a matrix kernel's flops / 2, priced at its first input's element type:
  ``mac_pj``), its vector element operations (a vector kernel's flops: ``vector_op_pj``), the bytes
  the on-chip cache delivered to the cores (``onchip_pj_per_byte``) and its HBM bytes
  (``hbm_pj_per_byte``). The core-rail terms (MACs, vector ops, on-chip bytes) scale with the
  square of the voltage the kernel ran at (E = C V^2 per operation); HBM has its own supply.
- a copy: its HBM bytes and its bytes over the host link or over each interconnect hop; a
  collective: the bytes it sent over each of its links.
- while a command runs, the device's static power (``static_w`` at the nominal voltage, scaling
  with the voltage) times its duration is its share of the static energy.

Power management (DVFS): a power mode (``[device.power.modes.NAME]``) is a V/f curve and a cap. The
clock may take any value on a ``clock_step_mhz`` grid from the mode's top clock down to its lowest
point, the voltage interpolated linearly between the points. A kernel runs at the highest clock at
which its modelled power (dynamic energy over its duration at that clock, plus static power at
that voltage) fits under the cap; its cost is the cost model's at that clock (compute terms
stretch, HBM terms do not). When even the lowest clock does not fit, it runs there. A kernel under
the cap at the top clock keeps the cost model's cost unchanged.

Left out: the power of concurrent kernels is not added up for the cap (each kernel is fitted
alone: the management reacts per kernel, not to the device's summed draw), the clock changes
instantly (no ramp), copies and collectives run at full speed (the DMA engines and links are not
on the core clock), and temperature (the thermal throttle is a fault: emulator/faults.py).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from emulator.config import DeviceConfig, PowerConfig, PowerModeConfig
from emulator.kernels import dtypes

PJ = 1e-12
_RATE_CLASS = {"bool": "int8", "uint8": "int8", "int8": "int8", "int16": "int32", "int32": "int32",
               "int64": "int32", "uint16": "int32", "uint32": "int32", "uint64": "int32",
               "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
               "complex64": "float32", "complex128": "float64", "complex32": "float16"}


class KernelPower(NamedTuple):
    """What the power management decided for one kernel."""
    cost: object          # the kernel's Cost at ``clock_ghz`` (the cost model's own when unthrottled)
    dynamic_j: float      # its dynamic energy (J) at the voltage of ``clock_ghz``
    static_w: float       # the device's static power (W) at that voltage
    clock_ghz: float      # the clock it runs at
    throttled: bool       # the cap held it below the mode's top clock


def mac_class(dtype_name: str) -> str:
    """The ``mac_pj`` field an element type's MACs are priced at."""
    if dtype_name.startswith("float8"):
        return "float8"
    return _RATE_CLASS.get(dtype_name, "float32")


def curve(config: DeviceConfig, mode: PowerModeConfig) -> tuple[tuple, tuple]:
    """(clocks, voltages) of the mode's V/f curve, highest clock first (an empty curve: the device
    clock at the nominal voltage down to half that clock at 3/4 of it)."""
    if mode.clocks_ghz:
        clocks, volts = mode.clocks_ghz, mode.voltages_v
        top = config.clock_ghz
        if clocks[0] > top + 1e-9:
            # The cost model times kernels at device.clock_ghz, so the curve is cut there (a description
            # that lowers the device clock keeps its inherited modes' shape below it).
            keep = [(f, v) for f, v in zip(clocks, volts) if f < top - 1e-9]
            points = [(top, voltage_at(clocks, volts, top))] + keep
            return tuple(f for f, _ in points), tuple(v for _, v in points)
        return clocks, volts
    v = config.power.nominal_voltage_v
    return (config.clock_ghz, config.clock_ghz / 2), (v, 0.75 * v)


def clock_grid(config: DeviceConfig, mode: PowerModeConfig) -> list[tuple[float, float]]:
    """Every (clock GHz, voltage V) the power management may choose in ``mode``, highest first."""
    clocks, volts = curve(config, mode)
    step = mode.clock_step_mhz / 1e3
    grid, f = [], clocks[0]
    while f >= clocks[-1] - 1e-12:
        grid.append((f, voltage_at(clocks, volts, f)))
        f = round(f - step, 9)
    if grid[-1][0] > clocks[-1] + 1e-9:
        grid.append((clocks[-1], volts[-1]))
    return grid


def voltage_at(clocks, volts, f: float) -> float:
    """The curve's voltage at clock ``f`` (linear between points, the end points beyond them)."""
    if f >= clocks[0]:
        return volts[0]
    for (f0, v0), (f1, v1) in zip(zip(clocks, volts), zip(clocks[1:], volts[1:])):
        if f >= f1:
            return v1 + (v0 - v1) * (f - f1) / (f0 - f1)
    return volts[-1]


class PowerManagement:
    """One device's power management in one power mode (``mode``: a name, None for the default)."""

    def __init__(self, config: DeviceConfig, fidelity: str = "kernel", mode: str | None = None, index: int = 0):
        self.config = config
        self.power = config.power
        self.mode = self.power.mode(mode)
        self.fidelity = fidelity
        self.index = index
        self.grid = clock_grid(config, self.mode)
        self.top_clock_ghz = self.grid[0][0]
        self.cap_w = self.mode.power_cap_w
        self._cost_devices: dict[float, object] = {}

    # -- energies ------------------------------------------------------------------------
    def static_w(self, voltage: float) -> float:
        return self.power.static_w * voltage / self.power.nominal_voltage_v

    def core_energy_j(self, engine: str, flops: float, mac_dtype: str, cache_bytes: float) -> float:
        """Energy (J) at the nominal voltage of a kernel's core-rail work: MACs or vector ops, and
        the bytes the cache delivered."""
        p = self.power
        if engine == "matrix":
            ops = flops / 2 * getattr(p.mac_pj, mac_class(mac_dtype))
        else:
            ops = flops * p.vector_op_pj
        return (ops + cache_bytes * p.onchip_pj_per_byte) * PJ

    def hbm_energy_j(self, nbytes: float) -> float:
        return nbytes * self.power.hbm_pj_per_byte * PJ

    def copy_energy_j(self, hbm_bytes: float, link_bytes: float, link: str) -> float:
        """Dynamic energy (J) of a copy: HBM bytes, and bytes over the host link ("host") or over
        interconnect hops ("interconnect": ``link_bytes`` summed over the hops)."""
        p = self.power
        per_byte = p.host_link_pj_per_byte if link == "host" else p.interconnect_pj_per_byte if link else 0.0
        return (hbm_bytes * p.hbm_pj_per_byte + link_bytes * per_byte) * PJ

    # -- the cap ------------------------------------------------------------------------------
    def kernel(self, kernel, operands, cost, mac_dtype: str) -> KernelPower:
        """The clock ``kernel`` (a library ``Kernel``) runs at on ``operands`` and its energy, given its
        cost at the device clock (``cost``)."""
        resident = self.config.scratchpad.operands_resident
        core = self.core_energy_j(kernel.engine, cost.flops, mac_dtype, cost.cache_bytes)
        hbm = 0.0 if resident else self.hbm_energy_j(cost.nbytes)
        nominal = self.power.nominal_voltage_v

        def at(i):
            f, v = self.grid[i]
            c = cost if abs(f - self.config.clock_ghz) < 1e-9 else kernel.cost(self._cost_device(f), *operands)
            dynamic = core * (v / nominal) ** 2 + hbm
            return c, dynamic, self.static_w(v), f

        def fits(point) -> bool:
            c, dynamic, static, _ = point
            return c.ns <= 0 or dynamic / (c.ns * 1e-9) + static <= self.cap_w

        top = at(0)
        if fits(top):
            return KernelPower(*top, False)
        lo, hi = 1, len(self.grid) - 1   # power falls with the clock: the highest that fits
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            point = at(mid)
            if fits(point):
                best, hi = point, mid - 1
            else:
                lo = mid + 1
        return KernelPower(*(best or at(len(self.grid) - 1)), True)

    def _cost_device(self, clock_ghz: float):
        dev = self._cost_devices.get(clock_ghz)
        if dev is None:
            from emulator.device import CostDevice
            # The same chip at a lower clock (its modes left out: they may not exceed the clock).
            slower = dataclasses.replace(self.config, clock_ghz=clock_ghz, power=PowerConfig())
            dev = self._cost_devices[clock_ghz] = CostDevice(slower, self.index, self.fidelity)
        return dev


def first_input_dtype(operands) -> str:
    """The element type a matrix kernel's MACs run at: its first input's (the operand after the
    output), or the output's for a kernel with one operand."""
    tensors = [o for o in operands if hasattr(o, "strides")]
    if not tensors:
        return ""
    return dtypes.NAMES.get((tensors[1] if len(tensors) > 1 else tensors[0]).dtype, "")
