"""Hardware description: frozen dataclasses loaded from TOML presets.

Every field has a default, a unit and a description (gem5's ``Param`` habit);
values are validated at construction, and a bad value or unknown key raises
``ConfigError`` naming the dotted field. There are no setters: to change a chip,
write another description.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.errors import ConfigError

PRESET_DIR = Path(__file__).parent / "presets"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def param(default: Any, unit: str, doc: str, *, minimum: float | None = None,
          choices: tuple | None = None):
    """A described hardware parameter (a field without a description is a bug)."""
    if not doc:
        raise ValueError("every hardware parameter needs a description")
    return field(default=default,
                 metadata={"unit": unit, "doc": doc, "minimum": minimum, "choices": choices})


class _Validated:
    """Checks each field's type, minimum and choices after construction."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            if dataclasses.is_dataclass(value) or meta.get("named_tables"):
                continue  # nested tables validate themselves
            expected = type(f.default)
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
                value = float(value)
            if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
                raise ConfigError(f.name, f"expected {expected.__name__}, got {value!r}")
            if meta.get("minimum") is not None and not value >= meta["minimum"]:  # NaN fails too
                raise ConfigError(f.name, f"must be >= {meta['minimum']} {meta['unit']}, got {value}")
            if meta.get("choices") and value not in meta["choices"]:
                raise ConfigError(f.name, f"must be one of {meta['choices']}, got {value!r}")


@dataclass(frozen=True)
class HbmConfig(_Validated):
    capacity_bytes: int = param(16 * GiB, "B", "device memory capacity", minimum=1 * MiB)
    bandwidth_gb_per_s: float = param(1600.0, "GB/s", "peak HBM bandwidth (all channels together)", minimum=0.001)
    latency_ns: float = param(120.0, "ns", "access latency added to each transfer", minimum=0.0)
    channels: int = param(16, "1", "independent channels; one tile transfer streams from one channel at "
                                   "bandwidth / channels (tile fidelity)", minimum=1)
    efficiency: float = param(1.0, "1", "fraction of peak bandwidth a long stream sustains (refresh, "
                                        "bank conflicts, page misses)", minimum=0.01)

    @property
    def sustained_gb_per_s(self) -> float:
        return self.bandwidth_gb_per_s * min(self.efficiency, 1.0)


@dataclass(frozen=True)
class DmaConfig(_Validated):
    engines: int = param(4, "1", "DMA engines per device; copies run on them concurrently", minimum=1)
    setup_ns: float = param(500.0, "ns", "descriptor fetch and setup per copy", minimum=0.0)
    bytes_per_cycle: int = param(1024, "B/cycle", "bytes one DMA engine moves per device clock cycle", minimum=1)


@dataclass(frozen=True)
class HostLinkConfig(_Validated):
    bandwidth_gb_per_s: float = param(32.0, "GB/s", "bandwidth of each device's host link (PCIe-like), "
                                                    "per direction", minimum=0.001)
    latency_ns: float = param(1000.0, "ns", "one-way host link latency", minimum=0.0)


@dataclass(frozen=True)
class InterconnectConfig(_Validated):
    bandwidth_gb_per_s: float = param(100.0, "GB/s", "bandwidth of one device-to-device link, per direction",
                                      minimum=0.001)
    latency_ns: float = param(700.0, "ns", "device-to-device link latency (per hop)", minimum=0.0)
    topology: str = param("fully_connected", "", "which device pairs have links: fully_connected (a link "
                                                 "per pair), ring (neighbours only; other traffic hops "
                                                 "through every link on the shorter way round), switch "
                                                 "(one port per device into a switch)",
                          choices=("fully_connected", "ring", "switch"))
    links_per_pair: int = param(1, "1", "parallel links between two connected devices (bandwidth adds up)",
                                minimum=1)
    devices_per_node: int = param(0, "1", "devices per node of a multi-node job: global rank r sits on node "
                                          "r // devices_per_node; the links above join the devices of one node, "
                                          "the internode link joins nodes (0: one node holds every rank)",
                                  minimum=0)
    internode_bandwidth_gb_per_s: float = param(25.0, "GB/s", "bandwidth of the network link between two nodes, "
                                                              "per direction", minimum=0.001)
    internode_latency_ns: float = param(5000.0, "ns", "latency of the network link between two nodes", minimum=0.0)
    # The collective model's parameters (emulator/collectives.py).
    protocol_efficiency: float = param(1.0, "1", "fraction of a link's bandwidth a collective's payload gets "
                                                 "(the rest is the protocol's flags and synchronisation: NCCL's "
                                                 "Simple protocol)", minimum=0.01)
    in_switch_reduction: bool = param(False, "", "the switch reduces and multicasts (NVLink SHARP / NVLS): an "
                                                 "all_reduce inside one node can send each byte into the switch "
                                                 "once (topology switch only)")
    in_switch_efficiency: float = param(1.0, "1", "fraction of a port's bandwidth the in-switch reduction and "
                                                  "multicast sustain", minimum=0.01)
    collective_step_ns: float = param(1000.0, "ns", "fixed cost of one algorithm step of a collective "
                                                    "(synchronisation with the peer, work per chunk), added to "
                                                    "the link latency", minimum=0.0)
    collective_launch_ns: float = param(5000.0, "ns", "fixed cost of one collective (launch and setup)", minimum=0.0)
    direct_max_bytes: int = param(256 * KiB, "B", "largest message for which the one-shot direct algorithm is a "
                                                  "candidate (its staging buffer)", minimum=0)


def _rate(default: float, what: str):
    return param(default, "1/cycle", what, minimum=1e-6)


@dataclass(frozen=True)
class MatrixRates(_Validated):
    """MACs per processing element per cycle for each element type (1.0: one MAC per PE per cycle,
    the rate SCALE-Sim's cycle formulas assume). Integer types of 8 bits and bool use ``int8``;
    wider integers use ``int32``."""
    int8: float = _rate(2.0, "MACs per PE per cycle on int8/uint8/bool operands")
    int32: float = _rate(0.25, "MACs per PE per cycle on int16/int32/int64 operands")
    float16: float = _rate(1.0, "MACs per PE per cycle on float16 operands")
    bfloat16: float = _rate(1.0, "MACs per PE per cycle on bfloat16 operands")
    float32: float = _rate(0.25, "MACs per PE per cycle on float32 operands")
    float64: float = _rate(0.0625, "MACs per PE per cycle on float64 operands")
    float8: float = _rate(2.0, "MACs per PE per cycle on float8 operands (_scaled_mm; default: twice bfloat16)")


@dataclass(frozen=True)
class VectorRates(_Validated):
    """Element operations per lane per cycle for each element type (8-bit types and bool use
    ``int8``, 16- and 32-bit integers ``int32``, 64-bit integers ``int64``)."""
    int8: float = _rate(1.0, "ops per lane per cycle on int8/uint8/bool elements")
    int32: float = _rate(1.0, "ops per lane per cycle on int16/int32 elements")
    int64: float = _rate(0.5, "ops per lane per cycle on int64 elements")
    float16: float = _rate(1.0, "ops per lane per cycle on float16 elements")
    bfloat16: float = _rate(1.0, "ops per lane per cycle on bfloat16 elements")
    float32: float = _rate(1.0, "ops per lane per cycle on float32 elements")
    float64: float = _rate(0.5, "ops per lane per cycle on float64 (and complex) elements")


def _rate_class(dtype: str, matrix: bool) -> str:
    """The rate field of ``MatrixRates``/``VectorRates`` an element type name uses."""
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        return dtype
    if dtype in ("complex64", "complex128"):
        return "float32" if dtype == "complex64" else "float64"
    if dtype in ("bool", "uint8", "int8"):
        return "int8"
    if dtype in ("int16", "int32", "uint16", "uint32"):
        return "int32"
    if dtype in ("int64", "uint64"):
        return "int32" if matrix else "int64"
    if dtype.startswith("float8_"):   # one-byte floats: the matrix engine's fp8 rate; vector ops widen them
        return "float8" if matrix else "int8"
    raise ValueError(f"unknown element type {dtype!r}")


@dataclass(frozen=True)
class MatrixEngineConfig(_Validated):
    rows: int = param(128, "PE", "systolic array rows", minimum=1)
    cols: int = param(128, "PE", "systolic array columns", minimum=1)
    dataflow: str = param("ws", "", "systolic dataflow (weight/output/input stationary)", choices=("ws", "os", "is"))
    weight_double_buffering: bool = param(False, "", "the next fold's stationary operand preloads while the "
                                                     "current fold streams (hides the fill of every fold "
                                                     "but the first)")
    efficiency: float = param(1.0, "1", "fraction of the systolic cycle model's rate the engine sustains "
                                        "(operand delivery, instruction issue, power-limited clock)",
                              minimum=0.01)
    macs_per_cycle: MatrixRates = field(default_factory=MatrixRates)


@dataclass(frozen=True)
class VectorEngineConfig(_Validated):
    lanes: int = param(256, "elements/cycle", "SIMD lanes of the vector engine", minimum=1)
    pipeline_cycles: int = param(16, "cycles", "fill/drain latency per kernel", minimum=0)
    transcendental_cycles: float = param(8.0, "cycles", "cycles per element group of exp or log; every other "
                                                        "function's table cost scales with it", minimum=0.0)
    ops_per_cycle: VectorRates = field(default_factory=VectorRates)


@dataclass(frozen=True)
class ScratchpadConfig(_Validated):
    bytes_per_core: int = param(8 * MiB, "B", "scratchpad SRAM of one core", minimum=0)
    bandwidth_bytes_per_cycle: int = param(4096, "B/cycle", "scratchpad read+write bandwidth of one core; a "
                                                            "kernel's engines cannot move its bytes faster",
                                           minimum=1)
    double_buffering: bool = param(True, "", "kernels double-buffer their tiles through the scratchpad, so "
                                             "operand DMA overlaps compute")
    operands_resident: bool = param(False, "", "assume every operand already sits in the scratchpad: no HBM "
                                               "traffic is charged (SCALE-Sim's compute-cycle setting)")


@dataclass(frozen=True)
class CacheConfig(_Validated):
    """The on-chip cache between HBM and the cores' scratchpads (an L2), shared by all cores
    (emulator/memory.py: what it holds and how traffic crosses it)."""
    capacity_bytes: int = param(32 * MiB, "B", "capacity of the device's shared on-chip cache; operands whose "
                                               "working set fits are read from HBM once", minimum=0)
    bandwidth_bytes_per_cycle: int = param(4096, "B/cycle", "cache-to-cores bandwidth of the whole device "
                                                            "(all slices together)", minimum=1)
    line_bytes: int = param(128, "B", "cache line: the unit a strided sweep must keep resident to reuse its "
                                      "neighbours", minimum=1)
    sector_bytes: int = param(32, "B", "HBM access granularity (the cache's sector): the least an access of "
                                       "one element moves", minimum=1)

    def __post_init__(self):
        super().__post_init__()
        if self.line_bytes % self.sector_bytes:
            raise ConfigError("line_bytes", f"must be a multiple of sector_bytes ({self.sector_bytes} B), "
                                            f"got {self.line_bytes}")


@dataclass(frozen=True)
class CommandProcessorConfig(_Validated):
    ring_entries: int = param(1024, "commands", "entries of each submission ring", minimum=2)
    decode_ns: float = param(100.0, "ns", "command fetch and decode time", minimum=0.0)
    launch_ns: float = param(1500.0, "ns", "kernel launch overhead, held by the command processor (not "
                                           "by the compute engines)", minimum=0.0)


@dataclass(frozen=True)
class MmuConfig(_Validated):
    page_size_bytes: int = param(64 * KiB, "B", "page size of the device page tables", minimum=4 * KiB)


def _pj(default: float, what: str):
    return param(default, "pJ", what, minimum=0.0)


@dataclass(frozen=True)
class MacEnergy(_Validated):
    """Energy of one MAC on the matrix engine for each element type (the keys of ``MatrixRates``),
    at ``power.nominal_voltage_v``: the multiply-accumulate with its operand delivery from the
    scratchpad and register files."""
    int8: float = _pj(0.5, "energy of one MAC on int8/uint8/bool operands")
    int32: float = _pj(2.0, "energy of one MAC on int16/int32/int64 operands")
    float16: float = _pj(1.0, "energy of one MAC on float16 operands")
    bfloat16: float = _pj(1.0, "energy of one MAC on bfloat16 operands")
    float32: float = _pj(3.0, "energy of one MAC on float32 operands")
    float64: float = _pj(8.0, "energy of one MAC on float64 operands")
    float8: float = _pj(0.5, "energy of one MAC on float8 operands")


@dataclass(frozen=True)
class PowerModeConfig(_Validated):
    """A named power mode (``[device.power.modes.NAME]``): the clock and voltage points the power
    management may run at (a V/f curve, highest clock first) and the power cap it keeps under."""
    name: str = param("max", "", "the mode's name (its table's key)")
    clocks_ghz: tuple = param((), "GHz", "clock points of the V/f curve, highest first; the first is the "
                                         "mode's top clock (points above device.clock_ghz are cut off there). Empty: a generic curve "
                                         "from device.clock_ghz at the nominal voltage to half that clock at "
                                         "3/4 of it")
    voltages_v: tuple = param((), "V", "core voltage at each clock point (non-increasing); empty with an empty "
                                       "clocks_ghz")
    power_cap_w: float = param(300.0, "W", "power the management keeps the device under: a kernel whose "
                                           "modelled power exceeds it runs at a lower clock", minimum=0.001)
    clock_step_mhz: float = param(15.0, "MHz", "granularity of the clocks between the points (the voltage is "
                                               "interpolated linearly between them)", minimum=0.001)

    def __post_init__(self):
        for key in ("clocks_ghz", "voltages_v"):
            value = getattr(self, key)
            if isinstance(value, list):
                value = tuple(value)
                object.__setattr__(self, key, value)
            if (not isinstance(value, tuple)
                    or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in value)):
                raise ConfigError(key, f"expected a list of positive numbers, got {value!r}")
            object.__setattr__(self, key, tuple(float(v) for v in value))
        super().__post_init__()
        clocks, volts = self.clocks_ghz, self.voltages_v
        if len(clocks) != len(volts):
            raise ConfigError("voltages_v", f"needs one voltage per clock point ({len(clocks)}), got {len(volts)}")
        if any(b >= a for a, b in zip(clocks, clocks[1:])):
            raise ConfigError("clocks_ghz", f"must be strictly decreasing, got {list(clocks)}")
        if any(b > a for a, b in zip(volts, volts[1:])):
            raise ConfigError("voltages_v", f"must not increase as the clock falls, got {list(volts)}")


def _default_modes() -> tuple:
    return (PowerModeConfig(),)


@dataclass(frozen=True)
class PowerConfig(_Validated):
    """Energy and power (emulator/power.py: each command's energy, the cap and the clock steps)."""
    static_w: float = param(50.0, "W", "static power (leakage and always-on logic) at the nominal voltage, "
                                       "drawn whether or not anything runs; scales with the voltage", minimum=0.0)
    tdp_w: float = param(300.0, "W", "thermal design power (informational: the modes' caps are what the model "
                                     "enforces)", minimum=0.001)
    nominal_voltage_v: float = param(1.0, "V", "core voltage at which the energies below are given (the "
                                               "voltage at device.clock_ghz)", minimum=0.001)
    vector_op_pj: float = param(0.5, "pJ", "energy of one vector-engine element operation (32-bit), at the "
                                           "nominal voltage", minimum=0.0)
    onchip_pj_per_byte: float = param(1.5, "pJ/B", "energy of one byte the on-chip cache delivers to the cores "
                                                   "(cache and scratchpad access, wires), at the nominal voltage",
                                      minimum=0.0)
    hbm_pj_per_byte: float = param(35.0, "pJ/B", "energy of one byte read from or written to HBM (array, "
                                                 "PHY and controller); HBM has its own supply: no voltage scaling",
                                   minimum=0.0)
    host_link_pj_per_byte: float = param(40.0, "pJ/B", "energy of one byte over the host link (PCIe-like)",
                                         minimum=0.0)
    interconnect_pj_per_byte: float = param(10.0, "pJ/B", "energy of one byte over one device-to-device link "
                                                          "(per hop)", minimum=0.0)
    default_mode: str = param("max", "", "the power mode the device runs in (EMU_POWER_MODE overrides it)")
    mac_pj: MacEnergy = field(default_factory=MacEnergy)
    modes: tuple = field(default_factory=_default_modes, metadata={
        "unit": "", "named_tables": PowerModeConfig,
        "doc": "the named power modes, one table each: [device.power.modes.NAME]"})

    def __post_init__(self):
        modes = self.modes
        if isinstance(modes, dict):
            built = []
            for name, table in modes.items():
                try:
                    built.append(_build(PowerModeConfig, {"name": name, **table} if isinstance(table, dict)
                                        else table, ""))
                except ConfigError as err:
                    raise ConfigError(f"modes.{name}.{err.field}" if isinstance(table, dict) else f"modes.{name}",
                                      str(err).split(": ", 1)[1]) from None
            modes = tuple(built)
            object.__setattr__(self, "modes", modes)
        if not isinstance(modes, tuple) or not modes or not all(isinstance(m, PowerModeConfig) for m in modes):
            raise ConfigError("modes", f"expected one or more [device.power.modes.NAME] tables, got {modes!r}")
        super().__post_init__()
        if self.default_mode not in self.mode_names:
            raise ConfigError("default_mode", f"no power mode named {self.default_mode!r} "
                                              f"(modes: {', '.join(self.mode_names)})")

    @property
    def mode_names(self) -> tuple:
        return tuple(m.name for m in self.modes)

    def mode(self, name: str | None = None) -> PowerModeConfig:
        """The mode named ``name`` (None or "default": ``default_mode``); ConfigError for no such mode."""
        name = self.default_mode if name in (None, "", "default") else name
        for m in self.modes:
            if m.name == name:
                return m
        raise ConfigError("device.power.default_mode", f"no power mode named {name!r} "
                                                       f"(modes: {', '.join(self.mode_names)})")


@dataclass(frozen=True)
class WatchdogConfig(_Validated):
    # Defined before DeviceConfig (not at the end of the file) because DeviceConfig's field
    # default needs the class; the TOML table is [device.watchdog].
    timeout_ns: float = param(1_000_000.0, "ns", "simulated time after which the watchdog declares a busy "
                              "engine hung or a silent firmware dead (device-scope fault)", minimum=1.0)
    heartbeat_ns: float = param(100_000.0, "ns", "period of the firmware heartbeat the watchdog checks",
                                minimum=1.0)


@dataclass(frozen=True)
class DeviceConfig(_Validated):
    name: str = param("Seed-1", "", "marketing name of the device")
    clock_ghz: float = param(1.4, "GHz", "core clock", minimum=0.001)
    cores: int = param(4, "1", "compute cores; each has a matrix engine, a vector engine and a scratchpad",
                       minimum=1)
    hbm: HbmConfig = field(default_factory=HbmConfig)
    dma: DmaConfig = field(default_factory=DmaConfig)
    matrix_engine: MatrixEngineConfig = field(default_factory=MatrixEngineConfig)
    vector_engine: VectorEngineConfig = field(default_factory=VectorEngineConfig)
    scratchpad: ScratchpadConfig = field(default_factory=ScratchpadConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    command_processor: CommandProcessorConfig = field(default_factory=CommandProcessorConfig)
    mmu: MmuConfig = field(default_factory=MmuConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    power: PowerConfig = field(default_factory=PowerConfig)

    @property
    def total_memory(self) -> int:
        """Device memory in bytes (the name torch.cuda's device properties use)."""
        return self.hbm.capacity_bytes

    @property
    def sram_bytes(self) -> int:
        """Scratchpad SRAM of all cores together."""
        return self.scratchpad.bytes_per_core * self.cores

    def peak_flops(self, engine: str = "matrix", dtype: str = "bfloat16") -> float:
        """Peak FLOP/s of all cores' ``engine`` ("matrix": 2 per MAC; "vector": 1 per op) on
        ``dtype`` (an element type name, e.g. "float32"; integer names map to their rate class)."""
        if engine == "matrix":
            e = self.matrix_engine
            rate = getattr(e.macs_per_cycle, _rate_class(dtype, matrix=True))
            return 2.0 * e.rows * e.cols * rate * self.clock_ghz * 1e9 * self.cores
        if engine == "vector":
            e = self.vector_engine
            return e.lanes * getattr(e.ops_per_cycle, _rate_class(dtype, matrix=False)) * self.clock_ghz * 1e9 * self.cores
        raise ValueError(f"unknown engine {engine!r} (matrix or vector)")

    @property
    def hbm_bytes_per_s(self) -> float:
        """Sustained HBM bandwidth (peak x efficiency) in B/s: the roofline's memory ceiling."""
        return self.hbm.sustained_gb_per_s * 1e9


@dataclass(frozen=True)
class HostConfig(_Validated):
    api_call_ns: float = param(2000.0, "ns", "modelled host time of one runtime API call", minimum=0.0)
    # Host cost model of work the host does itself (the torch plugin's host fallback):
    # fallback_overhead_ns + max(flops / flops_per_s, bytes / memory_bandwidth_gb_per_s).
    flops_per_s: float = param(100e9, "FLOP/s", "host compute throughput for work run on the host CPU",
                               minimum=1.0)
    memory_bandwidth_gb_per_s: float = param(20.0, "GB/s", "host memory bandwidth for work run on the host CPU",
                                             minimum=1e-6)
    fallback_overhead_ns: float = param(5000.0, "ns", "fixed host cost of dispatching one op to the host CPU",
                                        minimum=0.0)
    interrupt_service_ns: float = param(1000.0, "ns", "host CPU time the driver spends servicing one device "
                                                      "interrupt (stolen from the host thread when it arrives "
                                                      "while that thread runs)", minimum=0.0)
    # A malloc the caching allocator serves from its cache makes no driver call: it costs the
    # allocator's own bookkeeping. Published figure: PyTorch's CUDA caching allocator serves a
    # steady-state torch.empty in "0-1 us" (jvoltci.github.io/mosaic/foundations/cpp-memory/
    # custom-allocators); the midpoint of that range.
    cached_alloc_ns: float = param(500.0, "ns", "modelled host time of an allocation the caching allocator "
                                                "serves from its cache (no driver call)", minimum=0.0)
    # Replaying a captured program writes each command's descriptor into the ring (no per-call
    # validation, no doorbell). Published figure: a CUDA graph of 80 kernels launches in 3.5 us of
    # CPU time (cuda.juliagpu.org/dev/usage/graphs/), 44 ns per node.
    command_encode_ns: float = param(44.0, "ns", "modelled host time of encoding one command of a replayed "
                                                 "program (CUDA Graphs' per-node launch cost)", minimum=0.0)


@dataclass(frozen=True)
class SystemConfig(_Validated):
    name: str = param("default", "", "name of the preset or file this came from")
    num_devices: int = param(2, "1", "devices in the system", minimum=1)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    host_link: HostLinkConfig = field(default_factory=HostLinkConfig)
    interconnect: InterconnectConfig = field(default_factory=InterconnectConfig)
    host: HostConfig = field(default_factory=HostConfig)
    fidelity: str = param("kernel", "", "timing fidelity: kernel (analytical per-kernel cost) or tile "
                                        "(tile-level discrete events); EMU_FIDELITY overrides it",
                          choices=("kernel", "tile"))


def _build(cls, data: dict, prefix: str):
    if not isinstance(data, dict):
        raise ConfigError(prefix or cls.__name__, f"expected a table, got {data!r}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        if key not in known:
            raise ConfigError(name, f"unknown field (known: {', '.join(sorted(known))})")
        sub = known[key].default_factory if known[key].default_factory is not dataclasses.MISSING else None
        if sub is not None and dataclasses.is_dataclass(sub):
            kwargs[key] = _build(sub, value, name)
        else:
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise ConfigError(f"{prefix}.{err.field}" if prefix else err.field,
                          str(err).split(": ", 1)[1]) from None


def from_dict(data: dict) -> SystemConfig:
    """Builds a validated system description from nested dictionaries."""
    return _build(SystemConfig, data, "")


def load_file(path: str | os.PathLike, ignore: tuple = ()) -> SystemConfig:
    """A TOML description. A top-level ``preset = "name"`` starts from that preset (its tables
    override it field by field); without it, from the dataclass defaults. Top-level tables named
    in ``ignore`` belong to another reader (e.g. ``faults``) and are skipped."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("EMU_CONFIG", f"no such file: {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(str(path), f"not valid TOML: {err}") from None
    for key in ignore:
        data.pop(key, None)
    named = "name" in data
    base = data.pop("preset", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError("preset", f"expected the name of a preset, got {base!r}")
        data = _merge(_preset_data(base), data)
    if not named:
        data["name"] = path.stem
    return from_dict(data)


def _merge(base: dict, over: dict) -> dict:
    """``over``'s tables override ``base``'s field by field (recursively)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _preset_data(name: str) -> dict:
    path = PRESET_DIR / f"{name}.toml"
    if not path.exists():
        raise ConfigError("preset", f"unknown preset {name!r} (available: {', '.join(presets())})")
    data = tomllib.loads(path.read_text())
    base = data.pop("preset", None)
    return _merge(_preset_data(base), data) if base else data


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_preset(name: str) -> SystemConfig:
    path = PRESET_DIR / f"{name}.toml"
    if not path.exists():
        raise ConfigError("EMU_PRESET", f"unknown preset {name!r} (available: {', '.join(presets())})")
    return load_file(path)


def describe(config) -> dict:
    """Nested dict of the description with units, for reports and properties."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("named_tables"):   # [x.NAME] tables: {NAME: {field: value}}
            out[f.name] = {m.name: {k: v for k, v in describe(m).items() if k != "name"} for m in value}
        else:
            out[f.name] = describe(value) if dataclasses.is_dataclass(value) else value
    return out
