"""Host driver of the Seed device (kernel-mode-driver analogue)."""
from driver.driver import Context, Driver, Queue, TensorRef
from driver.errors import DriverError, DriverStatus, FirmwareRecordError
from driver.firmware_loader import SUPPORTED_FIRMWARE_MAJOR

__all__ = ["Driver", "Context", "Queue", "TensorRef", "DriverError", "DriverStatus",
           "FirmwareRecordError", "SUPPORTED_FIRMWARE_MAJOR"]
