"""Every environment variable the stack reads, in one place.

- ``EMU_PRESET``: name of a hardware preset (``default``, ``tiny``, ...).
- ``EMU_CONFIG``: path of a TOML hardware description (wins over EMU_PRESET).
- ``EMU_FIDELITY=kernel|tile``: timing fidelity: an analytical cost per kernel (the
  default, fast) or tile-level discrete events (each tile's load, compute and store).
- ``EMU_LAUNCH_BLOCKING=1``: every launch and copy waits for completion, so a
  device fault is raised by the call that caused it.
- ``EMU_TRACE_ENTRIES=n``: how many command trace records (the timeline's source)
  each device keeps, newest first (default 200000; 0 switches the trace off).
- ``EMU_FAULTS``: hardware faults armed at power-on (docs/faults.md): either
  ``kind[@device][:key=value,...]`` items separated by ``;`` (e.g.
  ``dma_error:after_commands=3;ecc_correctable@1:probability=0.01,seed=7,persistent=true``),
  or the path of a TOML file with a ``[faults]`` section. The ``EMU_CONFIG`` file's own
  ``[faults]`` section is read too.
- ``EMU_HOST_FALLBACK=allow|warn|forbid``: what the PyTorch plugin does with an op
  that has no device path: run it on the host silently, run it and warn once per op
  (the default), or raise before anything runs.
- ``EMU_CPU_ISA=amx|avx512|avx2|baseline``: the most the device's kernels (host code) may use of
  the host's instruction set (default: the best it has; a level it lacks is refused at power-on).
  Read by the kernel library itself, in emulator/kernels/isa.pyx, once per process: the kernels
  sit below this layer. docs/numerics.md says what it changes.
- ``EMU_MODE=functional|projection``: ``functional`` (the default) computes every value;
  ``projection`` runs the same commands through the same timing model with no kernel computing
  and device memory as address space only (docs/projection.md). Read at power-on.
- ``EMU_POWER_MODE=name``: the power mode the devices run in, one of the description's
  ``[device.power.modes.NAME]`` (``default``: its ``device.power.default_mode``); docs/hardware.md,
  "Power and energy". Read at power-on.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    preset: str = "default"
    config_path: str | None = None
    fidelity: str | None = None   # None: the hardware description's own (kernel by default)
    launch_blocking: bool = False
    trace_entries: int = 200_000
    host_fallback: str = "warn"
    faults: tuple = ()  # (kind, device, {trigger: value}) armed at power-on
    mode: str = "functional"  # EMU_MODE: "functional" computes values, "projection" only times them
    power_mode: str | None = None  # EMU_POWER_MODE; None: the description's default_mode

    def __post_init__(self):
        if self.fidelity is not None and self.fidelity not in FIDELITIES:
            from runtime.errors import InvalidValueError
            raise InvalidValueError(f"EMU_FIDELITY={self.fidelity!r}: expected one of {', '.join(FIDELITIES)}")
        if self.host_fallback not in HOST_FALLBACK_POLICIES:
            from runtime.errors import InvalidValueError
            raise InvalidValueError(f"host_fallback={self.host_fallback!r}: expected one of "
                                    f"{', '.join(HOST_FALLBACK_POLICIES)}")
        if self.mode not in MODES:
            from runtime.errors import InvalidValueError
            raise InvalidValueError(f"EMU_MODE={self.mode!r}: expected one of {', '.join(MODES)}")

    @property
    def projection(self) -> bool:
        return self.mode == "projection"

    @classmethod
    def from_environment(cls, environ=os.environ) -> "Settings":
        return cls(
            preset=environ.get("EMU_PRESET") or "default",
            config_path=environ.get("EMU_CONFIG") or None,
            fidelity=environ.get("EMU_FIDELITY", "").strip().lower() or None,
            launch_blocking=environ.get("EMU_LAUNCH_BLOCKING", "0").strip().lower() in ("1", "true", "yes", "on"),
            trace_entries=_non_negative_int(environ, "EMU_TRACE_ENTRIES", 200_000),
            host_fallback=host_fallback_policy(environ),
            faults=fault_requests(environ),
            mode=execution_mode(environ),
            power_mode=environ.get("EMU_POWER_MODE", "").strip() or None,
        )

    def load_config(self):
        """The hardware description these settings select (raises driver.DriverError)."""
        from driver import load_configuration
        config = load_configuration(self.preset, self.config_path)
        if self.fidelity is not None and config.fidelity != self.fidelity:
            import dataclasses
            config = dataclasses.replace(config, fidelity=self.fidelity)
        if self.power_mode not in (None, "default"):
            import dataclasses
            power = config.device.power
            if self.power_mode not in power.mode_names:
                from runtime.errors import InvalidValueError
                raise InvalidValueError(f"EMU_POWER_MODE={self.power_mode!r}: the hardware description "
                                        f"{config.name!r} has no such power mode (modes: "
                                        f"{', '.join(power.mode_names)})")
            power = dataclasses.replace(power, default_mode=self.power_mode)
            config = dataclasses.replace(config, device=dataclasses.replace(config.device, power=power))
        return config


HOST_FALLBACK_POLICIES = ("allow", "warn", "forbid")
FIDELITIES = ("kernel", "tile")
MODES = ("functional", "projection")


def execution_mode(environ=os.environ) -> str:
    """``EMU_MODE`` (default ``functional``), read alone (``torch.emu.is_projection_mode()`` asks
    it before the device powers on)."""
    return environ.get("EMU_MODE", "").strip().lower() or "functional"


def host_fallback_policy(environ=os.environ) -> str:
    """``EMU_HOST_FALLBACK`` (default ``warn``); read alone, so that a consumer of this one
    setting does not fail on an unrelated variable."""
    text = environ.get("EMU_HOST_FALLBACK", "").strip().lower() or "warn"
    if text not in HOST_FALLBACK_POLICIES:
        from runtime.errors import InvalidValueError
        raise InvalidValueError(f"EMU_HOST_FALLBACK={environ.get('EMU_HOST_FALLBACK')!r}: expected one of "
                                f"{', '.join(HOST_FALLBACK_POLICIES)}")
    return text


def _non_negative_int(environ, name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        from runtime.errors import InvalidValueError
        raise InvalidValueError(f"{name}={text!r}: expected a whole number >= 0")
    return value


def fault_requests(environ=os.environ) -> tuple:
    """The faults of ``EMU_FAULTS`` and of the ``[faults]`` section of the ``EMU_CONFIG`` file, as
    (kind, device, trigger dict). Kinds and triggers are checked when they are armed."""
    requests = []
    config_path = environ.get("EMU_CONFIG") or None
    if config_path and os.path.exists(config_path):
        requests += _toml_faults(config_path, "EMU_CONFIG")
    text = environ.get("EMU_FAULTS", "").strip()
    if text.endswith(".toml"):
        requests += _toml_faults(text, "EMU_FAULTS")
    elif text:
        requests += [_parse_fault(item.strip()) for item in text.split(";") if item.strip()]
    return tuple(requests)


def _toml_faults(path: str, variable: str) -> list:
    """``[faults]`` with ``inject = [{kind = "...", device = 0, <trigger> = ...}, ...]`` (or
    ``[[faults.inject]]`` tables)."""
    import tomllib
    from runtime.errors import InvalidValueError
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as err:
        if variable == "EMU_CONFIG":
            return []  # the hardware description's own loader reports what is wrong with the file
        raise InvalidValueError(f"{variable}={path!r}: cannot read its [faults] section: {err}") from err
    section = data.get("faults", {})
    if not isinstance(section, dict) or set(section) - {"inject"}:
        raise InvalidValueError(f"{variable}={path!r}: [faults] takes one key, inject = [{{kind = ..., ...}}], "
                                f"got {sorted(section) if isinstance(section, dict) else section!r}")
    out = []
    for entry in section.get("inject", []):
        if not isinstance(entry, dict) or "kind" not in entry:
            raise InvalidValueError(f"{variable}={path!r}: each [faults] inject entry needs a kind, got {entry!r}")
        entry = dict(entry)
        kind, device = entry.pop("kind"), entry.pop("device", 0)
        if "address_range" in entry:
            entry["address_range"] = tuple(entry["address_range"])
        out.append((kind, device, entry))
    return out


def _parse_fault(item: str) -> tuple:
    from runtime.errors import InvalidValueError
    head, _, rest = item.partition(":")
    kind, _, device = head.strip().partition("@")
    try:
        device = int(device) if device else 0
    except ValueError:
        raise InvalidValueError(f"EMU_FAULTS: {item!r}: the device after @ must be an int") from None
    trigger = {}
    for pair in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = pair.partition("=")
        if not eq:
            raise InvalidValueError(f"EMU_FAULTS: {item!r}: expected key=value, got {pair!r}")
        trigger[key.strip()] = _parse_value(key.strip(), value.strip(), item)
    return kind.strip(), device, trigger


def _parse_value(key: str, value: str, item: str):
    from runtime.errors import InvalidValueError
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if key == "address_range":
        lo, sep, hi = value.partition("-")
        try:
            return (int(lo, 0), int(hi, 0))
        except ValueError:
            raise InvalidValueError(f"EMU_FAULTS: {item!r}: address_range is lo-hi (e.g. 0x1000-0x2000)") from None
    for parse in (lambda v: int(v, 0), float):
        try:
            return parse(value)
        except ValueError:
            pass
    return value
