"""Host driver of the Seed device (kernel-mode-driver analogue)."""
from driver.driver import Context, Driver, Queue, TensorRef, describe_configuration, load_configuration
from firmware.abi import ELEMENT_NAMES, ELEMENT_SIZE
from firmware import FAULT_KINDS, FAULT_SCOPES, FAULT_TRIGGERS
from driver.errors import DriverError, DriverStatus, FirmwareRecordError
from driver.firmware_loader import SUPPORTED_FIRMWARE_MAJOR

__all__ = ["Driver", "Context", "Queue", "TensorRef", "DriverError", "DriverStatus", "load_configuration",
           "describe_configuration", "ELEMENT_SIZE", "ELEMENT_NAMES",
           "FirmwareRecordError", "SUPPORTED_FIRMWARE_MAJOR", "FAULT_KINDS", "FAULT_SCOPES", "FAULT_TRIGGERS"]
