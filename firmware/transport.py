"""The device boundary as an interface: what a driver may do to a device, and nothing more.

A driver reaches hardware through MMIO and DMA-able memory: it writes ring slots,
rings doorbells, reads fence words, programs page tables and takes interrupts.
These two classes name exactly those operations (in the spirit of tinygrad's
``*Iface`` classes). Every method takes and returns plain values (ints, floats,
tuples, ABI records); none hands out an object of the simulation behind it, so
the same driver could sit on real hardware. ``firmware.platform`` implements
them for the emulated system.

Waiting is part of the interface because on an emulated device the host's wait
is what advances device time: ``wait_semaphore`` and ``wait_ring_space`` return
the device time at which the condition became true.
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class TransportError(Exception):
    """The transport could not do what was asked (base of the errors below)."""


class WaitNeverSatisfied(TransportError):
    """A host wait that no queued work can ever satisfy (a fence nobody will signal)."""


class InvalidRequest(TransportError):
    """The device refused a mailbox request (e.g. an unknown fault kind); nothing changed."""


class DeviceTransport(ABC):
    """One device as the driver sees it."""

    index: int
    config: object  # the device's hardware description (a frozen dataclass)

    # -- boot ------------------------------------------------------------
    @abstractmethod
    def load_firmware(self, image) -> tuple[int, int, int]:
        """Loads and boots ``image``; returns the version the firmware reports."""

    # -- rings and doorbells ------------------------------------------------
    @abstractmethod
    def create_ring(self) -> int: ...

    @abstractmethod
    def ring_entries(self, ring_id: int) -> int: ...

    @abstractmethod
    def ring_free_slots(self, ring_id: int) -> int: ...

    @abstractmethod
    def write_ring(self, ring_id: int, submit_ns: float, command) -> None:
        """Writes one slot (``submit_ns`` is the host time it was written); no doorbell."""

    def write_ring_many(self, ring_id: int, submit_ns: float, commands) -> None:
        """Writes consecutive slots in one ring write (a replayed program's command list; the
        caller checked ``ring_free_slots``); no doorbell. A transport that can copy a block of
        slots at once overrides it."""
        for command in commands:
            self.write_ring(ring_id, submit_ns, command)

    @abstractmethod
    def ring_doorbell(self, ring_id: int) -> None: ...

    @abstractmethod
    def submit(self, ring_id: int, submit_ns: float, command) -> bool:
        """Writes a slot and rings the doorbell; False (nothing written) when the ring is full."""

    @abstractmethod
    def wait_ring_space(self, ring_id: int, min_free: int = 1) -> float:
        """Blocks until the firmware has freed ``min_free`` slots; returns that device time (ns)."""

    # -- fences ----------------------------------------------------------
    @abstractmethod
    def semaphore_value(self, sem_id: int) -> int: ...

    @abstractmethod
    def semaphore_time_ns(self, sem_id: int) -> float:
        """Device time of the semaphore's last signal."""

    @abstractmethod
    def wait_semaphore(self, sem_id: int, value: int) -> float:
        """Blocks until the semaphore reaches ``value``; returns the device time it did.
        Raises ``WaitNeverSatisfied`` when no queued work can ever get it there."""

    # -- memory management unit -------------------------------------------
    memory_bytes: int
    page_size: int

    @abstractmethod
    def create_address_space(self, asid: int) -> None: ...

    @abstractmethod
    def destroy_address_space(self, asid: int) -> None: ...

    @abstractmethod
    def map_pages(self, asid: int, va: int, pa: int, length: int) -> None: ...

    @abstractmethod
    def unmap_pages(self, asid: int, va: int) -> None: ...

    # -- interrupts, mailbox, telemetry -------------------------------------
    @abstractmethod
    def connect_interrupts(self, handler) -> None:
        """``handler(vector, payload)`` is called for every interrupt (payloads are ABI records)."""

    @abstractmethod
    def clear_context_fault(self, asid: int) -> None: ...

    @abstractmethod
    def configure_trace(self, entries: int) -> None:
        """Keeps the last ``entries`` command trace records (0 switches the trace off)."""

    @abstractmethod
    def telemetry(self) -> dict: ...

    # -- faults, health, reset (firmware mailbox) --------------------------------
    # Not abstract: a transport without fault injection raises NotImplementedError, saying so.
    def inject_fault(self, kind: str, trigger: dict) -> int:
        """Arms a hardware fault (kinds/triggers: emulator/faults.py); returns its handle.
        Raises ``InvalidRequest`` for an unknown kind or trigger."""
        raise NotImplementedError(f"{type(self).__name__} cannot inject faults")

    def cancel_fault(self, handle: int) -> bool:
        raise NotImplementedError(f"{type(self).__name__} cannot inject faults")

    def clear_faults(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot inject faults")

    def clear_ring_fault(self, ring_id: int) -> None:
        """Forget a ring's stream-scope fault once the driver reported it."""
        raise NotImplementedError(f"{type(self).__name__} has no stream-scope faults")

    def health(self) -> dict:
        """ECC counters, throttle, link and heartbeat state (plain values)."""
        raise NotImplementedError(f"{type(self).__name__} reports no health counters")

    def error_log(self) -> dict:
        """{"errors": [ErrorRecord, ...], "events": [hardware event dicts]} since power-on."""
        raise NotImplementedError(f"{type(self).__name__} keeps no error log")

    def take_poisoned_writes(self) -> list:
        """(device, asid, va, seq, ErrorRecord) of outputs skipped or faulted commands did not write."""
        return []

    def take_bad_pages(self) -> list:
        """Physical pages that had an uncorrectable error (to retire)."""
        return []

    def begin_reset(self) -> None:
        """Reset, step 1: aborts in-flight work (every queued command skipped, every fence still
        signalled, no wait left blocked). The host drains the devices, then calls finish_reset."""
        raise NotImplementedError(f"{type(self).__name__} cannot reset the device")

    def finish_reset(self) -> None:
        """Reset, step 2: the firmware and the engines restart clean."""
        raise NotImplementedError(f"{type(self).__name__} cannot reset the device")


class HostTransport(ABC):
    """The bus the devices of one host sit on, and the host's view of device time."""

    devices: list  # DeviceTransport, one per device, by index

    @abstractmethod
    def now_ns(self) -> float:
        """The devices' present time."""

    @abstractmethod
    def advance_to(self, t_ns: float) -> None:
        """Lets the devices run until ``t_ns`` (the host's present), without waiting on anything."""

    @abstractmethod
    def drain(self) -> None:
        """Lets the devices run until no queued work is left."""
