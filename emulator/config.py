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
            if dataclasses.is_dataclass(value):
                continue
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
    bandwidth_gb_per_s: float = param(1600.0, "GB/s", "peak HBM bandwidth", minimum=0.001)
    latency_ns: float = param(120.0, "ns", "access latency added to each transfer", minimum=0.0)
    channels: int = param(16, "1", "independent channels (informational)", minimum=1)


@dataclass(frozen=True)
class DmaConfig(_Validated):
    engines: int = param(4, "1", "DMA engines per device; copies run on them concurrently", minimum=1)
    setup_ns: float = param(500.0, "ns", "descriptor fetch and setup per copy", minimum=0.0)


@dataclass(frozen=True)
class HostLinkConfig(_Validated):
    bandwidth_gb_per_s: float = param(32.0, "GB/s", "host link (PCIe-like) bandwidth per direction", minimum=0.001)
    latency_ns: float = param(1000.0, "ns", "one-way host link latency", minimum=0.0)


@dataclass(frozen=True)
class InterconnectConfig(_Validated):
    bandwidth_gb_per_s: float = param(100.0, "GB/s", "device-to-device link bandwidth", minimum=0.001)
    latency_ns: float = param(700.0, "ns", "device-to-device link latency", minimum=0.0)


@dataclass(frozen=True)
class MatrixEngineConfig(_Validated):
    rows: int = param(128, "PE", "systolic array rows", minimum=1)
    cols: int = param(128, "PE", "systolic array columns", minimum=1)
    dataflow: str = param("ws", "", "systolic dataflow (weight/output/input stationary)", choices=("ws", "os", "is"))


@dataclass(frozen=True)
class VectorEngineConfig(_Validated):
    lanes: int = param(256, "elements/cycle", "SIMD lanes of the vector engine", minimum=1)
    pipeline_cycles: int = param(16, "cycles", "fill/drain latency per kernel", minimum=0)


@dataclass(frozen=True)
class CommandProcessorConfig(_Validated):
    ring_entries: int = param(1024, "commands", "entries of each submission ring", minimum=2)
    decode_ns: float = param(100.0, "ns", "command fetch and decode time", minimum=0.0)
    launch_ns: float = param(1500.0, "ns", "kernel launch overhead on the device", minimum=0.0)


@dataclass(frozen=True)
class MmuConfig(_Validated):
    page_size_bytes: int = param(64 * KiB, "B", "page size of the device page tables", minimum=4 * KiB)


@dataclass(frozen=True)
class DeviceConfig(_Validated):
    name: str = param("Seed-1", "", "marketing name of the device")
    clock_ghz: float = param(1.4, "GHz", "core clock", minimum=0.001)
    sram_bytes: int = param(32 * MiB, "B", "on-chip scratchpad SRAM", minimum=0)
    hbm: HbmConfig = field(default_factory=HbmConfig)
    dma: DmaConfig = field(default_factory=DmaConfig)
    matrix_engine: MatrixEngineConfig = field(default_factory=MatrixEngineConfig)
    vector_engine: VectorEngineConfig = field(default_factory=VectorEngineConfig)
    command_processor: CommandProcessorConfig = field(default_factory=CommandProcessorConfig)
    mmu: MmuConfig = field(default_factory=MmuConfig)

    @property
    def total_memory(self) -> int:
        """Device memory in bytes (the name torch.cuda's device properties use)."""
        return self.hbm.capacity_bytes


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


@dataclass(frozen=True)
class SystemConfig(_Validated):
    name: str = param("default", "", "name of the preset or file this came from")
    num_devices: int = param(2, "1", "devices in the system", minimum=1)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    host_link: HostLinkConfig = field(default_factory=HostLinkConfig)
    interconnect: InterconnectConfig = field(default_factory=InterconnectConfig)
    host: HostConfig = field(default_factory=HostConfig)


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


def load_file(path: str | os.PathLike) -> SystemConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("EMU_CONFIG", f"no such file: {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(str(path), f"not valid TOML: {err}") from None
    data.setdefault("name", path.stem)
    return from_dict(data)


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
        out[f.name] = describe(value) if dataclasses.is_dataclass(value) else value
    return out
