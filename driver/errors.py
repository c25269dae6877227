"""Driver statuses and the error that carries them.

A ``DriverError`` has a ``status`` and, for device faults, the firmware's
``ErrorRecord`` (for an emulator bug, its ``InternalErrorRecord``); the runtime
chains its own errors to it.
"""
from __future__ import annotations

from enum import IntEnum


class DriverStatus(IntEnum):
    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_DEVICE = 2
    OUT_OF_MEMORY = 3
    FIRMWARE_VERSION_MISMATCH = 4
    INVALID_HANDLE = 5
    CONTEXT_FAULTED = 6     # a page fault or kernel fault poisoned the context (sticky)
    DEADLOCK = 7            # a wait no queued command can satisfy
    NOT_INITIALIZED = 8
    INVALID_CONFIGURATION = 9  # the hardware description names a bad field
    INTERNAL_ERROR = 10     # the emulator hit a bug executing a command (not a device fault; not sticky)


class DriverError(Exception):
    def __init__(self, status: DriverStatus, message: str, record=None, **details):
        self.status = status
        self.record = record
        self.details = details
        super().__init__(f"[{status.name}] {message}")


class FirmwareRecordError(DriverError):
    """A firmware error record, decoded: the root of a device-fault cause chain."""

    def __init__(self, record):
        super().__init__(DriverStatus.CONTEXT_FAULTED,
                         f"firmware reported {record.status.name if hasattr(record.status, 'name') else record.status}"
                         f" on device {record.device} ring {record.ring} command {record.seq} "
                         f"in {record.unit}" + (f" at 0x{record.address:x}" if record.address is not None else "")
                         + f" (t={record.sim_time_ns:.0f} ns): {record.detail}", record=record)


class InternalErrorRecordError(DriverError):
    """The firmware's report of an emulator bug (an ``InternalErrorRecord``), decoded. Raised once,
    at the next synchronising driver call; the context is not faulted."""

    def __init__(self, record):
        super().__init__(DriverStatus.INTERNAL_ERROR,
                         f"internal emulator error on device {record.device} ring {record.ring} command "
                         f"{record.seq} in {record.unit} (t={record.sim_time_ns:.0f} ns): {record.detail}",
                         record=record)
