"""One emulated device: its hardware units wired together.

The device owns no behaviour of its own; firmware running on the command
processor drives the units.
"""
from __future__ import annotations

from emulator.command_processor import CommandProcessor
from emulator.config import DeviceConfig
from emulator.dma import DmaEngines
from emulator.hbm import HBM
from emulator.interrupt_controller import InterruptController
from emulator.matrix_engine import MatrixEngine
from emulator.mmu import MMU
from emulator.vector_engine import VectorEngine


class EmulatedDevice:
    def __init__(self, env, config: DeviceConfig, index: int, host_link, interconnect):
        self.env = env
        self.config = config
        self.index = index
        self.hbm = HBM(env, config.hbm, index)
        self.mmu = MMU(env, config.mmu, index)
        self.dma = DmaEngines(env, config.dma, index)
        self.host_link = host_link
        self.interconnect = interconnect
        self.matrix_engine = MatrixEngine(env, config.matrix_engine, config.clock_ghz)
        self.vector_engine = VectorEngine(env, config.vector_engine, config.clock_ghz)
        self.command_processor = CommandProcessor(env, config.command_processor, index)
        self.interrupts = InterruptController(env, index)
        self.peers: list[EmulatedDevice] = []
        self._engines = {"matrix": self.matrix_engine, "vector": self.vector_engine}

    def engine(self, name: str):
        return self._engines[name]
