"""Driver statuses and the error that carries them.

A ``DriverError`` has a ``status`` and, for device faults, the firmware's
``ErrorRecord`` (for an emulator bug, its ``InternalErrorRecord``); the runtime
chains its own errors to it.
"""
from __future__ import annotations

from enum import IntEnum

from firmware import abi


class DriverStatus(IntEnum):
    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_DEVICE = 2
    OUT_OF_MEMORY = 3
    FIRMWARE_VERSION_MISMATCH = 4
    INVALID_HANDLE = 5
    CONTEXT_FAULTED = 6     # a hardware fault (page fault, bus error) poisoned the context (sticky)
    DEADLOCK = 7            # a wait no queued command can satisfy
    NOT_INITIALIZED = 8
    INVALID_CONFIGURATION = 9  # the hardware description names a bad field
    INTERNAL_ERROR = 10     # the emulator hit a bug executing a command (not a device fault; not sticky)
    STREAM_FAULTED = 11     # a DMA/link/ring fault aborted one queue's work (reported once, then cleared)
    DEVICE_NEEDS_RESET = 12  # an uncorrectable ECC error, a hung engine, a lost heartbeat, a dead link
    DEVICE_RESET = 13       # the handle's device was reset since: its memory contents are gone
    NOT_SUPPORTED = 14      # the transport cannot do what was asked (e.g. no fault injection)
    DEVICE_INIT_FAILED = 15  # a device did not come up at initialisation


class DriverError(Exception):
    def __init__(self, status: DriverStatus, message: str, record=None, **details):
        self.status = status
        self.record = record
        self.details = details
        super().__init__(f"[{status.name}] {message}")


# A firmware record of operation scope (a command the firmware rejected) is INVALID_ARGUMENT.
_SCOPE_STATUS = {"operation": DriverStatus.INVALID_ARGUMENT, "context": DriverStatus.CONTEXT_FAULTED, "stream": DriverStatus.STREAM_FAULTED,
                 "device": DriverStatus.DEVICE_NEEDS_RESET}


def describe_record(record) -> str:
    """One line naming the hardware event (or, for an operation-scope record, the rejected command)
    behind a firmware error record and its correlation id."""
    status = record.status.name if hasattr(record.status, "name") else str(record.status)
    kind = abi.STATUS_KIND.get(record.status, status.lower())
    where = f" at 0x{record.address:x}" if record.address is not None else ""
    event = "rejected command" if abi.STATUS_SCOPE.get(record.status) == "operation" else "hardware event"
    return (f"{event} {kind} on device {record.device}, engine {record.unit}{where}, "
            f"t={record.sim_time_ns:.0f} ns (firmware status {status}, ring {record.ring}, "
            f"correlation id {record.seq}): {record.detail}")


class FirmwareRecordError(DriverError):
    """A firmware error record, decoded: the root of a device-fault cause chain. ``scope`` is the
    record's (abi.STATUS_SCOPE): operation, context, stream or device; ``kind`` the hardware event's kind and
    ``seq`` the faulting command's correlation id."""

    def __init__(self, record):
        self.scope = abi.STATUS_SCOPE.get(record.status, "context")
        self.kind = abi.STATUS_KIND.get(record.status, "kernel_fault")
        self.seq = record.seq
        super().__init__(_SCOPE_STATUS[self.scope], "firmware reported " + describe_record(record), record=record)


class InternalErrorRecordError(DriverError):
    """The firmware's report of an emulator bug (an ``InternalErrorRecord``), decoded. Raised once,
    at the next synchronising driver call; the context is not faulted."""

    def __init__(self, record):
        super().__init__(DriverStatus.INTERNAL_ERROR,
                         f"internal emulator error on device {record.device} ring {record.ring} command "
                         f"{record.seq} in {record.unit} (t={record.sim_time_ns:.0f} ns): {record.detail}",
                         record=record)
