"""Every environment variable the stack reads, in one place.

- ``EMU_PRESET``: name of a hardware preset (``default``, ``tiny``, ...).
- ``EMU_CONFIG``: path of a TOML hardware description (wins over EMU_PRESET).
- ``EMU_LAUNCH_BLOCKING=1``: every launch and copy waits for completion, so a
  device fault is raised by the call that caused it.
- ``EMU_TRACE_ENTRIES=n``: how many command trace records (the timeline's source)
  each device keeps, newest first (default 200000; 0 switches the trace off).
- ``EMU_HOST_FALLBACK=allow|warn|forbid``: what the PyTorch plugin does with an op
  that has no device path: run it on the host silently, run it and warn once per op
  (the default), or raise before anything runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    preset: str = "default"
    config_path: str | None = None
    launch_blocking: bool = False
    trace_entries: int = 200_000
    host_fallback: str = "warn"

    def __post_init__(self):
        if self.host_fallback not in HOST_FALLBACK_POLICIES:
            from runtime.errors import InvalidValueError
            raise InvalidValueError(f"host_fallback={self.host_fallback!r}: expected one of "
                                    f"{', '.join(HOST_FALLBACK_POLICIES)}")

    @classmethod
    def from_environment(cls, environ=os.environ) -> "Settings":
        return cls(
            preset=environ.get("EMU_PRESET") or "default",
            config_path=environ.get("EMU_CONFIG") or None,
            launch_blocking=environ.get("EMU_LAUNCH_BLOCKING", "0").strip().lower() in ("1", "true", "yes", "on"),
            trace_entries=_non_negative_int(environ, "EMU_TRACE_ENTRIES", 200_000),
            host_fallback=host_fallback_policy(environ),
        )

    def load_config(self):
        """The hardware description these settings select (raises driver.DriverError)."""
        from driver import load_configuration
        return load_configuration(self.preset, self.config_path)


HOST_FALLBACK_POLICIES = ("allow", "warn", "forbid")


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
