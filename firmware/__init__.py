"""Firmware of the Seed device: ring processing, fences, error records; its ABI."""
from firmware import abi
from firmware.image import FirmwareImage
from firmware.platform import (ConfigError, Deadlock, DeviceEndpoint, Platform, describe_description,
                               load_description)

__all__ = ["abi", "FirmwareImage", "DeviceEndpoint", "Platform", "ConfigError", "Deadlock", "load_description",
           "describe_description"]
