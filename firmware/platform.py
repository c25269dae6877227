"""The transport the driver talks to: a bus of device endpoints.

This is the boundary a real driver would cross with MMIO and DMA-able memory:
doorbells, ring slots, semaphore words, page-table writes, interrupt lines and
the firmware-load mailbox. Everything the driver does to a device goes through
a ``DeviceEndpoint``; swapping this module for real hardware access would leave
the driver unchanged.
"""
from __future__ import annotations

from emulator import ConfigError, EmulatedSystem, SystemConfig
from emulator.system import Deadlock
from emulator.config import describe, load_file, load_preset
from firmware import abi
from firmware.image import FirmwareImage
from firmware.scheduler import FirmwareInstance


class DeviceEndpoint:
    def __init__(self, system: EmulatedSystem, device):
        self.system = system
        self._device = device
        self.index = device.index
        self.config = device.config
        self.firmware: FirmwareInstance | None = None

    # -- boot -------------------------------------------------------------
    def load_firmware(self, image: FirmwareImage) -> tuple[int, int, int]:
        """Loads and boots ``image``; returns the version the firmware reports."""
        self.firmware = FirmwareInstance(self._device, image)
        return image.version

    # -- rings, doorbells, semaphores -----------------------------------
    def create_ring(self) -> int:
        ring = self._device.command_processor.create_ring()
        self.firmware.start_ring(ring)
        return ring.ring_id

    def ring_free_slots(self, ring_id: int) -> int:
        return self._device.command_processor.rings[ring_id].free_slots()

    def ring_entries(self, ring_id: int) -> int:
        return self._device.command_processor.rings[ring_id].entries

    def ring_space_event(self, ring_id: int, min_free: int = 1):
        return self._device.command_processor.rings[ring_id].space_available(min_free)

    def write_ring(self, ring_id: int, submit_ns: float, command) -> None:
        self._device.command_processor.rings[ring_id].write((submit_ns, command))

    def submit(self, ring_id: int, submit_ns: float, command) -> bool:
        """Writes a slot and rings the doorbell; False (nothing written) when the ring is full."""
        ring = self._device.command_processor.rings[ring_id]
        if not ring.free_slots():
            return False
        ring.write((submit_ns, command))
        ring.ring_doorbell()
        return True

    def ring_doorbell(self, ring_id: int) -> None:
        self._device.command_processor.rings[ring_id].ring_doorbell()

    def semaphore_value(self, sem_id: int) -> int:
        return self._device.command_processor.semaphores.value(sem_id)

    def semaphore_time_ns(self, sem_id: int) -> float:
        return self._device.command_processor.semaphores.signalled_at(sem_id)

    def semaphore_event(self, sem_id: int, target: int):
        return self._device.command_processor.semaphores.wait(sem_id, target)

    # -- memory management unit ------------------------------------------
    @property
    def memory_bytes(self) -> int:
        return self._device.hbm.capacity

    @property
    def page_size(self) -> int:
        return self._device.mmu.page_size

    def create_address_space(self, asid: int) -> None:
        self._device.mmu.create_address_space(asid)

    def destroy_address_space(self, asid: int) -> None:
        self._device.mmu.destroy_address_space(asid)

    def map_pages(self, asid: int, va: int, pa: int, length: int) -> None:
        self._device.mmu.map(asid, va, pa, length)

    def unmap_pages(self, asid: int, va: int) -> None:
        self._device.mmu.unmap(asid, va)

    # -- interrupts and telemetry -----------------------------------------
    def connect_interrupts(self, handler) -> None:
        self._device.interrupts.connect(handler)

    def clear_context_fault(self, asid: int) -> None:
        """Firmware mailbox: forget a context's fault after the driver reset it."""
        self.firmware.faulted_asids.pop(asid, None)

    def telemetry(self) -> dict:
        dev = self._device
        return {
            "kernel_stats": self.firmware.kernel_stats,
            "trace": self.firmware.trace,
            "engines_busy_ns": {"matrix_engine": dev.matrix_engine.busy_ns,
                                "vector_engine": dev.vector_engine.busy_ns,
                                "dma": dev.dma.busy_ns},
            "page_faults": dev.mmu.page_faults,
            "resident_bytes": dev.hbm.resident_bytes(),
        }


class Platform:
    """Powers on the emulated system described by ``config`` and lists its devices."""

    def __init__(self, config: SystemConfig):
        self.config = config
        self.system = EmulatedSystem(config)
        self.endpoints = [DeviceEndpoint(self.system, d) for d in self.system.devices]

    @property
    def now_ns(self) -> float:
        return self.system.now_ns

    @property
    def lock(self):
        return self.system.lock

    def run_until(self, event) -> None:
        self.system.run_until(event)


def load_description(preset: str, path: str | None = None) -> SystemConfig:
    """The hardware description of a platform: a TOML file if given, else a named preset.
    Raises ``ConfigError`` naming the offending field."""
    return load_file(path) if path else load_preset(preset)


def describe_description(config: SystemConfig) -> dict:
    """The description as nested dicts, units in the field names."""
    return describe(config)


__all__ = ["Platform", "DeviceEndpoint", "abi", "FirmwareImage", "ConfigError", "Deadlock", "load_description",
           "describe_description"]
