"""SimPy discrete-event model of the Seed accelerator and its kernel library.

Public entry points: ``EmulatedSystem`` (one per host), the hardware
description in ``emulator.config``, and the kernel table in
``emulator.kernels.library``.
"""
import logging

from emulator.config import SystemConfig, load_file, load_preset
from emulator.errors import ConfigError, EmulatorBug, EmulatorError, FaultRecord, HardwareFault, PageFault
from emulator.system import EmulatedSystem

__all__ = ["SystemConfig", "load_file", "load_preset", "ConfigError", "EmulatorBug", "EmulatorError",
           "FaultRecord", "HardwareFault", "PageFault", "EmulatedSystem"]
logging.getLogger("seed").addHandler(logging.NullHandler())  # library code never prints by default
