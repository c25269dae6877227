"""Firmware of the Seed device: ring processing, fences, error records; its ABI."""
from firmware import abi
from firmware.image import FirmwareImage
from firmware.platform import DeviceEndpoint, Platform

__all__ = ["abi", "FirmwareImage", "DeviceEndpoint", "Platform"]
