"""A tiny emulated system with firmware booted, driven directly through the Platform."""
import itertools

import numpy as np
import pytest

from emulator.config import load_preset
from emulator.kernels import dtypes
from firmware import FirmwareImage, Platform, abi

VA = 1 << 40       # where the rig maps device memory
MAPPED = 4 << 20   # bytes mapped at VA -> physical 0 in address space 1 of each device


class Rig:
    """Platform + firmware on each device, interrupts recorded, asid 1 mapped on each device."""

    VA = VA
    MAPPED = MAPPED

    def __init__(self, preset="tiny"):
        self.platform = Platform(load_preset(preset))
        self.irqs = {ep.index: [] for ep in self.platform.endpoints}
        self._seq = itertools.count(1)
        for ep in self.platform.endpoints:
            ep.load_firmware(FirmwareImage())
            ep.connect_interrupts(lambda vector, payload, i=ep.index: self.irqs[i].append((vector, payload)))
            ep.create_address_space(1)
            ep.map_pages(1, VA, 0, MAPPED)

    def ep(self, device=0):
        return self.platform.endpoints[device]

    def seq(self):
        return next(self._seq)

    def hbm(self, device, physical, nbytes, dtype=np.uint8):
        return self.platform.system.devices[device].hbm.view(physical, nbytes).view(dtype)

    def errors(self, device=0):
        return [p for v, p in self.irqs[device] if v == abi.Irq.ERROR]

    def completions(self, device=0):
        return [p for v, p in self.irqs[device] if v == abi.Irq.COMPLETION]

    def trace(self, device=0):
        return list(self.ep(device).firmware.trace)

    # -- commands ------------------------------------------------------
    @staticmethod
    def dev(offset, n, dtype=dtypes.FLOAT32, device=0, asid=1, strides=None):
        return abi.TensorDescriptor(abi.MemorySpace.DEVICE, device, asid, VA + offset, dtype, (n,),
                                    strides or (1,))

    @staticmethod
    def host(arr, dtype=dtypes.FLOAT32):
        return abi.TensorDescriptor(abi.MemorySpace.HOST, -1, 0, arr.ctypes.data, dtype, arr.shape,
                                    tuple(s // arr.itemsize for s in arr.strides))

    def copy(self, dst, src, asid=1):
        return abi.CopyCommand(abi.Opcode.COPY, self.seq(), asid, dst, src)

    def fill(self, dst, value, asid=1):
        return abi.FillCommand(abi.Opcode.FILL, self.seq(), asid, dst, value)

    def launch(self, kernel, args, asid=1):
        return abi.LaunchCommand(abi.Opcode.LAUNCH, self.seq(), asid, kernel, tuple(args))

    def signal(self, sem, value, asid=1):
        return abi.SignalCommand(abi.Opcode.SIGNAL, self.seq(), asid, sem, value)

    def wait(self, device, sem, value, asid=1):
        return abi.WaitCommand(abi.Opcode.WAIT, self.seq(), asid, device, sem, value)

    def submit(self, ring, *commands, device=0, submit_ns=0.0):
        ep = self.ep(device)
        for command in commands:
            ep.write_ring(ring, submit_ns, command)
        ep.ring_doorbell(ring)

    def run_until_sem(self, sem, value, device=0):
        t = self.ep(device).wait_semaphore(sem, value)
        assert self.ep(device).semaphore_value(sem) >= value
        assert t == self.ep(device).semaphore_time_ns(sem)
        return t


@pytest.fixture
def rig():
    return Rig()
