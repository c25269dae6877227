"""The emulated implementation of the device transport (firmware/transport.py).

This is the boundary a real driver would cross with MMIO and DMA-able memory:
doorbells, ring slots, fence words, page-table writes, interrupt lines and the
firmware-load mailbox. ``DeviceEndpoint`` is one device of the emulated system
with its firmware, ``Platform`` the host bus they share. Every method returns
plain values; the SimPy objects behind them stay on this side, so swapping this
module for real hardware access would leave the driver unchanged.
"""
from __future__ import annotations

from emulator import ConfigError, EmulatedSystem, SystemConfig
from emulator.config import describe, load_file, load_preset
from emulator.system import Deadlock
from firmware import abi
from firmware.image import FirmwareImage
from firmware.scheduler import FirmwareInstance
from firmware.transport import DeviceTransport, HostTransport, InvalidRequest, WaitNeverSatisfied
from emulator.faults import FaultSpec, FaultSpecError


class DeviceEndpoint(DeviceTransport):
    def __init__(self, system: EmulatedSystem, device):
        self._system = system
        self._device = device
        self._rings = device.command_processor.rings
        self._semaphores = device.command_processor.semaphores
        self.index = device.index
        self.config = device.config
        self.firmware: FirmwareInstance | None = None

    # -- boot -------------------------------------------------------------
    def load_firmware(self, image: FirmwareImage) -> tuple[int, int, int]:
        self.firmware = FirmwareInstance(self._device, image)
        return image.version

    # -- rings and doorbells ------------------------------------------------
    def create_ring(self) -> int:
        ring = self._device.command_processor.create_ring()
        self.firmware.start_ring(ring)
        return ring.ring_id

    def ring_free_slots(self, ring_id: int) -> int:
        return self._rings[ring_id].free_slots()

    def ring_entries(self, ring_id: int) -> int:
        return self._rings[ring_id].entries

    def write_ring(self, ring_id: int, submit_ns: float, command) -> None:
        self._rings[ring_id].write((submit_ns, command))

    def ring_doorbell(self, ring_id: int) -> None:
        self._rings[ring_id].ring_doorbell()

    def submit(self, ring_id: int, submit_ns: float, command) -> bool:
        return self._rings[ring_id].push((submit_ns, command))

    def wait_ring_space(self, ring_id: int, min_free: int = 1) -> float:
        ring = self._rings[ring_id]
        if ring.free_slots() < min_free:
            self._wait(ring.space_available(min_free), f"ring {ring_id} to free {min_free} slots")
        return self._system.now_ns

    # -- fences ----------------------------------------------------------
    def semaphore_value(self, sem_id: int) -> int:
        return self._semaphores.value(sem_id)

    def semaphore_time_ns(self, sem_id: int) -> float:
        return self._semaphores.signalled_at(sem_id)

    def wait_semaphore(self, sem_id: int, value: int) -> float:
        semaphores = self._semaphores
        if semaphores.value(sem_id) < value:
            self._wait(semaphores.wait(sem_id, value), f"semaphore {sem_id} to reach {value}")
        return semaphores.signalled_at(sem_id)

    def _wait(self, event, what: str) -> None:
        try:
            self._system.run_until(event)
        except Deadlock as err:
            raise WaitNeverSatisfied(f"device {self.index}: waiting for {what}, but no queued work "
                                     f"can ever get there") from err

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

    # -- interrupts, mailbox, telemetry -------------------------------------
    def connect_interrupts(self, handler) -> None:
        self._device.interrupts.connect(handler)

    def clear_context_fault(self, asid: int) -> None:
        """Firmware mailbox: forget a context's fault after the driver reset it."""
        self.firmware.clear_context_fault(asid)

    def configure_trace(self, entries: int) -> None:
        self.firmware.configure_trace(entries)

    def trace_since(self, min_seq: int) -> list:
        """The newest trace records, oldest first, back to (not including) the first record of a
        command older than ``min_seq``: every command of a block that began when the device was
        idle, without copying the whole trace (the profiler's read)."""
        trace = self.firmware.trace
        out = []
        for entry in reversed(trace or ()):
            if entry.seq < min_seq:
                break
            out.append(entry)
        out.reverse()
        return out

    # -- faults, health, reset (firmware mailbox) ------------------------------
    def inject_fault(self, kind: str, trigger: dict) -> int:
        """Arms a fault (emulator/faults.py) on this device; returns its handle."""
        try:
            spec = FaultSpec.build(kind, self.index, **trigger)
        except (FaultSpecError, TypeError) as err:
            raise InvalidRequest(str(err)) from err
        return self.firmware.inject(spec)

    def cancel_fault(self, handle: int) -> bool:
        return self.firmware.faults.cancel(handle)

    def clear_faults(self) -> None:
        self.firmware.faults.clear()

    def clear_ring_fault(self, ring_id: int) -> None:
        self.firmware.clear_ring_fault(ring_id)

    def health(self) -> dict:
        return self.firmware.health()

    def error_log(self) -> dict:
        fw = self.firmware
        return {"errors": list(fw.error_log),
                "events": [dict(zip(("kind", "device", "engine", "address", "sim_time_ns", "seq", "handle"), e))
                           for e in fw.events]}

    def take_poisoned_writes(self) -> list:
        return self.firmware.take_poisoned_writes()

    def take_bad_pages(self) -> list:
        """Physical pages an uncorrectable ECC error poisoned since the last call."""
        return self._device.hbm.take_poisoned_pages()

    def begin_reset(self) -> None:
        """Reset, step 1: abort in-flight work (every queued command skipped, every fence still
        signalled, no wait left blocked); the host then drains the device."""
        self.firmware.begin_reset()

    def finish_reset(self) -> None:
        """Reset, step 2 (after the drain): the firmware and the engines restart clean."""
        self.firmware.finish_reset()

    def telemetry(self) -> dict:
        dev = self._device
        return {
            "kernel_stats": self.firmware.kernel_stats,
            "trace": self.firmware.trace_entries(),
            "engines_busy_ns": {"matrix_engine": dev.matrix_engine.busy_ns,
                                "vector_engine": dev.vector_engine.busy_ns,
                                "dma": dev.dma.busy_ns},
            "page_faults": dev.mmu.page_faults,
            "resident_bytes": dev.hbm.resident_bytes(),
        }


class Platform(HostTransport):
    """Powers on the emulated system described by ``config`` and lists its devices."""

    def __init__(self, config: SystemConfig, mode: str = "functional"):
        self.config = config
        self.system = EmulatedSystem(config, mode=mode)
        self.devices = [DeviceEndpoint(self.system, d) for d in self.system.devices]

    @property
    def endpoints(self) -> list[DeviceEndpoint]:
        return self.devices

    def now_ns(self) -> float:
        return self.system.now_ns

    def advance_to(self, t_ns: float) -> None:
        self.system.run_to_time(t_ns)

    def drain(self) -> None:
        self.system.run_all()


def load_description(preset: str, path: str | None = None) -> SystemConfig:
    """The hardware description of a platform: a TOML file if given, else a named preset.
    A ``[faults]`` table in the file belongs to the runtime (docs/faults.md), not to the
    hardware, and is skipped. Raises ``ConfigError`` naming the offending field."""
    return load_file(path, ignore=("faults",)) if path else load_preset(preset)


def describe_description(config: SystemConfig) -> dict:
    """The description as nested dicts, units in the field names."""
    return describe(config)


__all__ = ["Platform", "DeviceEndpoint", "abi", "FirmwareImage", "ConfigError", "WaitNeverSatisfied",
           "load_description", "describe_description"]
