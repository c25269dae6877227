"""User-mode runtime of the Seed device: devices, streams, events, memory, launches."""
from driver import ELEMENT_NAMES, ELEMENT_SIZE, FAULT_KINDS, FAULT_SCOPES, FAULT_TRIGGERS, TensorRef
from runtime.errors import (CommandRejectedError, DeviceFaultError, DeviceNeedsResetError, EmuError, ErrorCode, InitializationError,
                            InvalidDeviceError, InvalidValueError, OutOfMemoryError, PoisonedDataError, ProjectionModeError, Scope,
                            StreamError, StreamFaultError)
from runtime.runtime import (Runtime, configured_device_count, device_of_address, get_runtime, hardware_description,
                             is_initialized, refuse_in_forked_child)
from runtime.settings import Settings
from runtime.stream import Event, Stream

__all__ = ["TensorRef", "ELEMENT_SIZE", "ELEMENT_NAMES", "device_of_address", "hardware_description", "Runtime", "get_runtime", "is_initialized", "refuse_in_forked_child", "configured_device_count", "Settings",
           "Stream", "Event", "EmuError", "ErrorCode", "Scope", "DeviceFaultError", "InitializationError",
           "InvalidDeviceError", "InvalidValueError", "OutOfMemoryError", "StreamError", "DeviceNeedsResetError",
           "StreamFaultError", "PoisonedDataError", "ProjectionModeError", "CommandRejectedError", "FAULT_KINDS", "FAULT_SCOPES", "FAULT_TRIGGERS"]
