"""Firmware of the Seed device: ring processing, fences, error records; its ABI; the transport
the driver reaches it through."""
from firmware import abi
from firmware.image import FirmwareImage
from firmware.platform import ConfigError, DeviceEndpoint, Platform, describe_description, load_description
from emulator.faults import KINDS as FAULT_KINDS, SCOPES as FAULT_SCOPES, TRIGGERS as FAULT_TRIGGERS
from firmware.transport import DeviceTransport, HostTransport, InvalidRequest, TransportError, WaitNeverSatisfied
# The model the device times a COLLECTIVE with: the driver checks a command's op against it and
# answers the host's estimates with it (the device's tuning table).
from emulator import collectives as collective_model

__all__ = ["abi", "FirmwareImage", "DeviceEndpoint", "Platform", "ConfigError", "DeviceTransport",
           "HostTransport", "TransportError", "InvalidRequest", "WaitNeverSatisfied", "load_description", "describe_description",
           "FAULT_KINDS", "FAULT_SCOPES", "FAULT_TRIGGERS", "collective_model"]
