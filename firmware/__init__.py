"""Firmware of the Seed device: ring processing, fences, error records; its ABI; the transport
the driver reaches it through."""
from firmware import abi
from firmware.image import FirmwareImage
from firmware.platform import ConfigError, DeviceEndpoint, Platform, describe_description, load_description
from firmware.transport import DeviceTransport, HostTransport, TransportError, WaitNeverSatisfied

__all__ = ["abi", "FirmwareImage", "DeviceEndpoint", "Platform", "ConfigError", "DeviceTransport",
           "HostTransport", "TransportError", "WaitNeverSatisfied", "load_description", "describe_description"]
