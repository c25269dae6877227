"""Runtime error model: error codes and scopes (the cudaError_t analogue).

Scopes say what an error poisons:
- OPERATION: bad argument, out of memory; nothing else is affected. A command the device rejected
  (a kernel's argument check, an unknown kernel: ``CommandRejectedError``) is reported once, at the
  next synchronising call; it did not run, and its outputs raise ``PoisonedDataError`` when read.
- STREAM: a wait that can never complete on a stream (a cyclic wait), or a DMA/link/ring fault
  that aborted that stream's queued work (reported once; other streams continue).
- (an emulator bug is OPERATION scope, code INTERNAL: it poisons nothing.)
- CONTEXT: a hardware fault of the context (an MMU page fault, a bus error); sticky, every later
  call on that device's context fails the same way until ``reset_device``.
- DEVICE: the device needs a reset (uncorrectable ECC, lost heartbeat, hung engine, link down);
  ``reset_device`` is the recovery. ``PoisonedDataError`` (operation scope) is raised when a
  tensor is read whose producing command was skipped or faulted, or that lived on a device that
  was reset; it is chained to the fault that invalidated the data.
- JOB: distributed runs (rank/job failures).
Every device error is chained (``raise ... from``) to the driver error, which
holds the firmware error record.
"""
from __future__ import annotations

from enum import Enum, IntEnum


class Scope(Enum):
    OPERATION = "operation"
    STREAM = "stream"
    CONTEXT = "context"
    DEVICE = "device"
    JOB = "job"


class ErrorCode(IntEnum):
    SUCCESS = 0
    INVALID_VALUE = 1
    OUT_OF_MEMORY = 2
    NOT_INITIALIZED = 3
    INITIALIZATION_ERROR = 4
    INVALID_DEVICE = 101
    INVALID_CONFIGURATION = 102
    FIRMWARE_VERSION_MISMATCH = 103
    ILLEGAL_ADDRESS = 700        # MMU page fault
    KERNEL_FAULT = 701
    DEADLOCK = 702
    ECC_UNCORRECTABLE = 214      # cudaErrorECCUncorrectable's number
    DMA_ERROR = 710
    DMA_TIMEOUT = 711
    ENGINE_HANG = 712            # the watchdog found a hung engine (cudaErrorLaunchTimeout's role)
    HEARTBEAT_LOST = 713         # the firmware stopped (cudaErrorDevicesUnavailable's role)
    RING_CORRUPTED = 714
    LINK_DOWN = 715
    PEER_LINK_ERROR = 716
    DEVICE_NEEDS_RESET = 717     # any other device-scope fault
    POISONED_DATA = 718          # the tensor's producer was skipped or faulted: its data is not valid
    DEVICE_RESET = 719           # the tensor lived on a device that was reset since
    NOT_SUPPORTED = 801
    INTERNAL = 999               # a bug in the emulator itself (cudaErrorUnknown's slot)


class EmuError(Exception):
    code = ErrorCode.INVALID_VALUE
    scope = Scope.OPERATION

    def __init__(self, message: str, code: ErrorCode | None = None, scope: Scope | None = None):
        if code is not None:
            self.code = code
        if scope is not None:
            self.scope = scope
        super().__init__(f"{message} [error {int(self.code)} {self.code.name}, scope {self.scope.value}]")


class InvalidValueError(EmuError):
    code = ErrorCode.INVALID_VALUE


class InvalidDeviceError(EmuError):
    code = ErrorCode.INVALID_DEVICE


class InitializationError(EmuError):
    code = ErrorCode.INITIALIZATION_ERROR


class OutOfMemoryError(EmuError):
    code = ErrorCode.OUT_OF_MEMORY

    def __init__(self, device: int, requested: int, allocated: int, reserved: int, free: int, total: int):
        self.device, self.requested, self.allocated, self.reserved, self.free = device, requested, allocated, reserved, free
        super().__init__(
            f"emu:{device} out of memory: tried to allocate {requested} bytes; {allocated} bytes allocated "
            f"by tensors, {reserved} bytes reserved by the caching allocator, {free} bytes free of {total}")


class CommandRejectedError(EmuError):
    """The device rejected a queued command (cudaErrorInvalidValue's class): a kernel found its
    arguments invalid, or the firmware knows no such kernel. Operation scope, never sticky: only
    that command did not run (its outputs hold no valid data); later work runs normally. Reported
    once, at the next synchronising call. ``__cause__`` is the driver's decoded firmware record."""
    code = ErrorCode.INVALID_VALUE
    scope = Scope.OPERATION


class _ReportedFault(EmuError):
    """A hardware fault the device reported: raised with the code of the fault (its class's scope)."""

    def __init__(self, message: str, code: ErrorCode):
        super().__init__(message, code=code)


class DeviceFaultError(_ReportedFault):
    """A fault the device reported while executing queued work (sticky for its context)."""
    scope = Scope.CONTEXT


class StreamError(EmuError):
    scope = Scope.STREAM
    code = ErrorCode.DEADLOCK


class EmulatorBugError(EmuError):
    """The emulator hit a bug while executing queued work: not a device fault, not the user's
    error. Operation scope, never sticky: the device stays usable. ``traceback`` is the text of
    the original traceback (from the firmware's internal-error record)."""
    code = ErrorCode.INTERNAL
    scope = Scope.OPERATION

    def __init__(self, message: str, traceback: str = ""):
        self.traceback = traceback
        super().__init__(message)
        if traceback:  # after the error code and scope, so the traceback reads as it was printed
            self.args = (f"{self.args[0]}\nOriginal traceback (please report it):\n{traceback.rstrip()}",)


class DeviceNeedsResetError(_ReportedFault):
    """A device-scope fault: every call on the device fails until ``reset_device``."""
    scope = Scope.DEVICE
    code = ErrorCode.DEVICE_NEEDS_RESET


class StreamFaultError(_ReportedFault):
    """A stream-scope hardware fault: the stream's queued work was aborted; other streams go on."""
    scope = Scope.STREAM
    code = ErrorCode.DMA_ERROR


class ProjectionModeError(EmuError):
    """Projection mode (``EMU_MODE=projection``) was asked for something only values can answer: a
    copy to the host, a read of device data, a data-dependent shape, the host fallback. Raised
    before the request does anything (nothing is made up); the device stays usable. ``op`` names
    what was refused."""
    code = ErrorCode.NOT_SUPPORTED
    scope = Scope.OPERATION

    def __init__(self, message: str, op: str = ""):
        self.op = op
        super().__init__(message)


class PoisonedDataError(EmuError):
    """The data read was never written (its producing command was skipped or faulted) or was lost
    in a device reset. ``__cause__`` is the fault that invalidated it."""
    scope = Scope.OPERATION
    code = ErrorCode.POISONED_DATA
