"""One emulated device: its hardware units wired together.

The device owns no behaviour of its own; firmware running on the command
processor drives the units. ``cores`` cores each have a matrix engine, a vector
engine and a scratchpad; kernels are booked on all the cores they use at once, so
each engine kind has one timeline per device (``matrix_engine``, ``vector_engine``),
while the command processor (launch overhead), HBM (bandwidth), the DMA engines and
the links have their own.
"""
from __future__ import annotations

from emulator.command_processor import CommandProcessor
from emulator.config import DeviceConfig
from emulator.dma import DmaEngines
from emulator.hbm import HBM
from emulator.interrupt_controller import InterruptController
from emulator.matrix_engine import MatrixEngine
from emulator.mmu import MMU
from emulator.timeline import Timeline
from emulator.vector_engine import VectorEngine


class EmulatedDevice:
    def __init__(self, env, config: DeviceConfig, index: int, host_link, interconnect,
                 fidelity: str = "kernel", projection: bool = False):
        self.env = env
        self.config = config
        self.index = index
        self.fidelity = fidelity
        self.projection = projection  # timed, not computed: kernels do not run, memory is unbacked
        self.hbm = HBM(env, config.hbm, index, backed=not projection)
        self.mmu = MMU(env, config.mmu, index)
        self.dma = DmaEngines(env, config.dma, index, config.clock_ghz)
        self.host_link = host_link
        self.interconnect = interconnect
        self.matrix_engine = MatrixEngine(env, config.matrix_engine, config.clock_ghz, config.cores, index,
                                          config.scratchpad.bytes_per_core)
        self.vector_engine = VectorEngine(env, config.vector_engine, config.clock_ghz, config.cores, index)
        self.command_processor = CommandProcessor(env, config.command_processor, index)
        # The command processor's own work (kernel launch overhead), apart from the engines'.
        self.launch_timeline = Timeline()
        self.launch_lane = f"dev{index}.cp"
        self.interrupts = InterruptController(env, index)
        self.peers: list[EmulatedDevice] = []
        self._engines = {"matrix": self.matrix_engine, "vector": self.vector_engine}

    def engine(self, name: str):
        return self._engines[name]


class CostDevice:
    """A device's timing units without its memory: what kernel cost functions read
    (``KERNELS[name].cost(CostDevice(config), *operands)``). For projections and validation of
    the cost model on any description (an 8 GB GEMM costs nothing to cost)."""

    def __init__(self, config: DeviceConfig, index: int = 0, fidelity: str = "kernel"):
        from emulator.hbm import HbmTiming
        self.config = config
        self.index = index
        self.fidelity = fidelity
        self.hbm = HbmTiming(config.hbm, index)
        self.dma = DmaEngines(None, config.dma, index, config.clock_ghz)
        self.matrix_engine = MatrixEngine(None, config.matrix_engine, config.clock_ghz, config.cores, index,
                                          config.scratchpad.bytes_per_core)
        self.vector_engine = VectorEngine(None, config.vector_engine, config.clock_ghz, config.cores, index)
