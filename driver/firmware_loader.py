"""Firmware load and version handshake."""
from __future__ import annotations

from driver.errors import DriverError, DriverStatus
from firmware import abi

SUPPORTED_FIRMWARE_MAJOR = abi.ABI_MAJOR


def load_and_check(endpoint, image) -> tuple[int, int, int]:
    """Loads ``image`` on ``endpoint`` and refuses a major version this driver does not speak."""
    reported = endpoint.load_firmware(image)
    if reported[0] != SUPPORTED_FIRMWARE_MAJOR:
        raise DriverError(
            DriverStatus.FIRMWARE_VERSION_MISMATCH,
            f"device {endpoint.index}: firmware {'.'.join(map(str, reported))} is not supported by this "
            f"driver, which speaks firmware ABI major version {SUPPORTED_FIRMWARE_MAJOR} "
            f"(firmware {'.'.join(map(str, abi.FIRMWARE_VERSION))}); load a firmware image with major "
            f"version {SUPPORTED_FIRMWARE_MAJOR} or install the matching driver",
            driver_major=SUPPORTED_FIRMWARE_MAJOR, firmware_version=reported)
    return reported
