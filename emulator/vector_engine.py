"""Vector engine: SIMD lanes for elementwise, reduction and data-movement kernels.

Cost = pipeline fill + ceil(elements / lanes) * cycles per element group.
Left out: per-op latency tables, transcendental units, lane masking costs.
"""
from __future__ import annotations

from emulator.config import VectorEngineConfig
from emulator.timeline import TimedEngine


class VectorEngine(TimedEngine):
    def __init__(self, env, config: VectorEngineConfig, clock_ghz: float):
        super().__init__(clock_ghz)
        self.config = config

    def elementwise_ns(self, elements: int, cycles_per_group: float = 1.0) -> float:
        groups = -(-elements // self.config.lanes)
        return (self.config.pipeline_cycles + groups * cycles_per_group) / self.clock_ghz
