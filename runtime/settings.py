"""Every environment variable the stack reads, in one place.

- ``EMU_PRESET``: name of a hardware preset (``default``, ``tiny``, ...).
- ``EMU_CONFIG``: path of a TOML hardware description (wins over EMU_PRESET).
- ``EMU_LAUNCH_BLOCKING=1``: every launch and copy waits for completion, so a
  device fault is raised by the call that caused it.
- ``EMU_TRACE_ENTRIES=n``: how many command trace records (the timeline's source)
  each device keeps, newest first (default 200000; 0 switches the trace off).
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

    @classmethod
    def from_environment(cls, environ=os.environ) -> "Settings":
        return cls(
            preset=environ.get("EMU_PRESET") or "default",
            config_path=environ.get("EMU_CONFIG") or None,
            launch_blocking=environ.get("EMU_LAUNCH_BLOCKING", "0").strip().lower() in ("1", "true", "yes", "on"),
            trace_entries=_non_negative_int(environ, "EMU_TRACE_ENTRIES", 200_000),
        )

    def load_config(self):
        """The hardware description these settings select (raises driver.DriverError)."""
        from driver import load_configuration
        return load_configuration(self.preset, self.config_path)


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
