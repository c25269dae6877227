"""The emulated system: one SimPy environment shared by every device of a host.

All devices live in one environment so inter-device traffic and time are
consistent. The simulation advances only when the host asks (``run_until``),
which is how many commands get processed in one batch.
"""
from __future__ import annotations

import threading

import simpy
from simpy.core import EmptySchedule

from emulator.config import SystemConfig
from emulator.device import EmulatedDevice
from emulator.dma import HostLink, Interconnect
from emulator.errors import EmulatorError


class Deadlock(EmulatorError):
    """The host waited on an event that no scheduled work can ever trigger.

    Not an emulator bug: the host's wait cannot complete (e.g. a wait on a fence that
    nothing queued will signal), which is the caller's error.
    """


class EmulatedSystem:
    def __init__(self, config: SystemConfig, mode: str = "functional"):
        from emulator.kernels import isa  # compiled; EMU_CPU_ISA is checked at power-on
        if mode not in ("functional", "projection"):
            raise ValueError(f"mode must be 'functional' or 'projection', got {mode!r}")
        self.config = config
        # "projection": the devices time every command, but their kernels compute nothing and their
        # memory is address space only (no host memory behind it).
        self.mode = mode
        self.cpu_isa = isa.power_on()   # the host instruction set the kernels use
        self.env = simpy.Environment()
        # The DES is not re-entrant; every host thread that advances it takes this lock.
        self.lock = threading.RLock()
        # Each device has its own host link; device pairs are linked per the topology.
        self.host_links = [HostLink(self.env, config.host_link, i) for i in range(config.num_devices)]
        self.interconnect = Interconnect(self.env, config.interconnect, config.num_devices)
        self.devices = [EmulatedDevice(self.env, config.device, i, self.host_links[i], self.interconnect,
                                       fidelity=config.fidelity, projection=mode == "projection")
                        for i in range(config.num_devices)]
        for device in self.devices:
            device.peers = self.devices

    @property
    def now_ns(self) -> float:
        return self.env.now

    def run_until(self, event) -> None:
        """Advance simulated time until ``event`` has been processed."""
        with self.lock:
            if event.processed:
                return
            # Step by hand rather than env.run(until=event): same semantics, without the
            # StopSimulation exception round trip on every host synchronisation.
            step = self.env.step
            try:
                while not event.processed:
                    step()
            except EmptySchedule:
                raise Deadlock("the host waits for an event that no queued command will "
                               "ever signal (a wait on a fence nobody signals?)") from None

    def run_to_time(self, t_ns: float) -> None:
        """Advance simulated time to ``t_ns`` (no-op if it is already there)."""
        with self.lock:
            if t_ns > self.env.now:
                self.env.run(until=t_ns)

    def run_all(self) -> None:
        """Run until no events are left (every queued command processed)."""
        with self.lock:
            self.env.run()
