"""Firmware load and version handshake."""
from __future__ import annotations

from driver.errors import DriverError, DriverStatus
from firmware import abi

SUPPORTED_FIRMWARE_MAJOR = abi.ABI_MAJOR


def load_and_check(endpoint, image) -> tuple[int, int, int]:
    """Loads ``image`` on ``endpoint`` and refuses a major version this driver does not speak."""
    try:
        reported = endpoint.load_firmware(image)
    except Exception as err:  # the device did not come up: say what was expected
        raise DriverError(
            DriverStatus.DEVICE_INIT_FAILED,
            f"device {endpoint.index} did not come up: loading firmware {image.version_string} failed "
            f"({type(err).__name__}: {err}); expected it to boot and report a version with major "
            f"{SUPPORTED_FIRMWARE_MAJOR}", expected_major=SUPPORTED_FIRMWARE_MAJOR) from err
    if (not isinstance(reported, tuple) or len(reported) != 3
            or not all(isinstance(v, int) for v in reported)):
        raise DriverError(
            DriverStatus.DEVICE_INIT_FAILED,
            f"device {endpoint.index} did not come up: its firmware reported version {reported!r}, "
            f"expected a (major, minor, patch) version with major {SUPPORTED_FIRMWARE_MAJOR}",
            expected_major=SUPPORTED_FIRMWARE_MAJOR, found=reported)
    if reported[0] != SUPPORTED_FIRMWARE_MAJOR:
        raise DriverError(
            DriverStatus.FIRMWARE_VERSION_MISMATCH,
            f"device {endpoint.index}: found firmware {'.'.join(map(str, reported))}, expected major version "
            f"{SUPPORTED_FIRMWARE_MAJOR}: it is not supported by this "
            f"driver, which speaks firmware ABI major version {SUPPORTED_FIRMWARE_MAJOR} "
            f"(firmware {'.'.join(map(str, abi.FIRMWARE_VERSION))}); load a firmware image with major "
            f"version {SUPPORTED_FIRMWARE_MAJOR} or install the matching driver",
            driver_major=SUPPORTED_FIRMWARE_MAJOR, firmware_version=reported)
    return reported
