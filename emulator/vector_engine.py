"""Vector engines: one SIMD unit per core for elementwise, reduction and data-movement kernels.

A kernel's elements are cut into groups of ``lanes`` and the groups spread evenly over the
cores (as few cores as there are groups). Per core: pipeline fill + its groups * cycles per
group / the element type's ``ops_per_cycle`` rate. Cycles per group come from the kernel (1
for plain arithmetic; the transcendental table of emulator/kernels/library.py, scaled by
``transcendental_cycles``, for functions evaluated as polynomial sequences).
Left out: lane masking, gather/scatter bank conflicts.
"""
from __future__ import annotations

from math import ceil

from emulator.config import VectorEngineConfig
from emulator.tiles import Work, coarsen
from emulator.timeline import TimedEngine

_RATE_FIELD = {0: "int8", 1: "int8", 2: "int8", 3: "int32", 4: "int32", 5: "int64", 6: "float16",
               7: "bfloat16", 8: "float32", 9: "float64", 10: "int32", 11: "int32", 12: "int64",
               13: "float32", 14: "float64"}


class VectorEngine(TimedEngine):
    def __init__(self, env, config: VectorEngineConfig, clock_ghz: float, cores: int = 1,
                 device_index: int = 0):
        super().__init__(clock_ghz, cores)
        self.config = config
        self.cores = cores
        self.lane_names = tuple(f"dev{device_index}.core{i}.vector" for i in range(cores))
        # The table's costs are relative to exp's 8 cycles.
        self.transcendental_scale = config.transcendental_cycles / 8.0

    def elementwise_ns(self, elements: int, cycles_per_group: float = 1.0) -> float:
        return self.elementwise(elements, cycles_per_group).ns

    def rate(self, dtype) -> float:
        return getattr(self.config.ops_per_cycle, _RATE_FIELD.get(dtype, "float32")) if dtype is not None else 1.0

    def elementwise(self, elements: int, cycles_per_group: float = 1.0, dtype=None,
                    what: str = "elementwise") -> Work:
        lanes = self.config.lanes
        if cycles_per_group > 1.0:
            cycles_per_group = 1.0 + (cycles_per_group - 1.0) * self.transcendental_scale
        groups = -(-elements // lanes)
        cores = min(self.cores, groups) or 1
        per_core = -(-groups // cores)
        fill = self.config.pipeline_cycles
        stream = ceil(per_core * cycles_per_group / self.rate(dtype)) if per_core else 0
        cycles = fill + stream
        tiles = coarsen(per_core)
        clock = self.clock_ghz
        tiling = f"{what} {cores} cores, {lanes}-lane groups, {groups} groups"
        return Work(cycles / clock, cycles, cores, tiling, self.lane_names[:cores], tiles,
                    stream / clock / tiles, fill / clock, "vector", fill / clock)
