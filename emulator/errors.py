"""Error hierarchy of the emulator.

Three kinds are kept apart (the gem5 habit of panic vs fatal):
- ``EmulatorBug``: the model itself is inconsistent; never the user's fault.
- ``ConfigError``: a hardware description is malformed; names the field.
- ``HardwareFault``: the emulated hardware hit a fault (page fault, bus error,
  ECC error, ...). It carries a ``FaultRecord`` that firmware turns into an error
  record and that the upper layers chain into their own exceptions.
``KernelArgumentError`` (a kernel rejected its arguments) is a device fault too;
any other exception raised while the firmware executes a command is an emulator bug.
"""
from __future__ import annotations

from dataclasses import dataclass


class EmulatorError(Exception):
    """Base class of every error raised by the emulator."""


class EmulatorBug(EmulatorError):
    """The emulator reached a state its model says is impossible."""


class KernelArgumentError(EmulatorError, ValueError):
    """A kernel rejected its launch arguments or operands (e.g. an out-of-range class index).

    Unlike any other exception raised while a kernel runs (an emulator bug), the firmware
    reports it as a ``KERNEL_FAULT`` error record: a sticky fault of the launching context.
    """


class ConfigError(EmulatorError, ValueError):
    """A hardware description (preset, TOML file or value) is invalid."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class FaultRecord:
    """What the hardware knows about a fault when it happens."""

    kind: str  # "page_fault", "bus_error", "kernel_fault", ...
    unit: str  # the unit that saw it, e.g. "mmu", "dma0", "vector_engine"
    device: int
    address: int | None
    sim_time_ns: float
    detail: str

    @property
    def engine(self) -> str:
        """The engine (unit) that saw the event: the name the fault-injection API uses."""
        return self.unit

    def __str__(self) -> str:
        where = f" at 0x{self.address:x}" if self.address is not None else ""
        return (f"{self.kind} on device {self.device} in {self.unit}{where} "
                f"(t={self.sim_time_ns:.0f} ns): {self.detail}")


class HardwareFault(EmulatorError):
    """A fault raised by an emulated hardware unit."""

    def __init__(self, record: FaultRecord):
        self.record = record
        super().__init__(str(record))


class PageFault(HardwareFault):
    """An access to a virtual address that the context has not mapped."""


class InjectedFault(HardwareFault):
    """A hardware event armed through emulator/faults.py (its ``record.kind`` is the fault kind)."""
