"""Every environment variable the stack reads, in one place.

- ``EMU_PRESET``: name of a hardware preset (``default``, ``tiny``, ...).
- ``EMU_CONFIG``: path of a TOML hardware description (wins over EMU_PRESET).
- ``EMU_LAUNCH_BLOCKING=1``: every launch and copy waits for completion, so a
  device fault is raised by the call that caused it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    preset: str = "default"
    config_path: str | None = None
    launch_blocking: bool = False

    @classmethod
    def from_environment(cls, environ=os.environ) -> "Settings":
        return cls(
            preset=environ.get("EMU_PRESET") or "default",
            config_path=environ.get("EMU_CONFIG") or None,
            launch_blocking=environ.get("EMU_LAUNCH_BLOCKING", "0").strip().lower() in ("1", "true", "yes", "on"),
        )

    def load_config(self):
        """The hardware description these settings select (raises driver.DriverError)."""
        from driver import load_configuration
        return load_configuration(self.preset, self.config_path)
