"""Firmware images: what the driver loads onto a device.

An image carries its version; the driver checks the major version against the
ABI it was built for. ``FirmwareImage.build(version=...)`` exists so tests (and
users rehearsing an upgrade) can load an image of another version.
"""
from __future__ import annotations

from dataclasses import dataclass

from firmware import abi


@dataclass(frozen=True)
class FirmwareImage:
    version: tuple[int, int, int] = abi.FIRMWARE_VERSION
    name: str = "seed-fw"

    @classmethod
    def build(cls, version: tuple[int, int, int] | None = None) -> "FirmwareImage":
        return cls(version=tuple(version) if version else abi.FIRMWARE_VERSION)

    @property
    def version_string(self) -> str:
        return ".".join(str(v) for v in self.version)
