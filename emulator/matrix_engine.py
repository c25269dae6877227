"""Matrix engine: a systolic array whose cycle counts follow SCALE-Sim.

For an R x C array the cycles of an M x K @ K x N GEMM are, per dataflow
(checked against SCALE-Sim 3.0.0, see tests/emulator/data/scalesim_results.jsonl):
  ws: ceil(K/R) * ceil(N/C) * (2R + C + M - 2) - 1
  os: ceil(M/R) * ceil(N/C) * (R + C + K - 2) - 1
  is: ceil(K/R) * ceil(M/C) * (2R + C + N - 2) - 1
Each fold preloads, streams, skews and drains with no overlap between folds.
Operand traffic is bounded separately by HBM bandwidth (the kernel cost model
takes the larger of the two). Left out: SRAM capacity stalls, sparsity.
"""
from __future__ import annotations

from math import ceil

from emulator.config import MatrixEngineConfig
from emulator.timeline import TimedEngine


def systolic_cycles(M: int, N: int, K: int, rows: int, cols: int, dataflow: str = "ws") -> int:
    if min(M, N, K) <= 0:
        return 0
    if dataflow == "ws":
        return ceil(K / rows) * ceil(N / cols) * (2 * rows + cols + M - 2) - 1
    if dataflow == "os":
        return ceil(M / rows) * ceil(N / cols) * (rows + cols + K - 2) - 1
    if dataflow == "is":
        return ceil(K / rows) * ceil(M / cols) * (2 * rows + cols + N - 2) - 1
    raise ValueError(f"unknown dataflow {dataflow!r}")


class MatrixEngine(TimedEngine):
    def __init__(self, env, config: MatrixEngineConfig, clock_ghz: float):
        super().__init__(clock_ghz)
        self.config = config

    def gemm_ns(self, M: int, N: int, K: int) -> float:
        c = self.config
        return systolic_cycles(M, N, K, c.rows, c.cols, c.dataflow) / self.clock_ghz
