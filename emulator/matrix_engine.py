"""Matrix engines: one systolic array per core, whose cycle counts follow SCALE-Sim.

For an R x C array the cycles of an M x K @ K x N GEMM are, per dataflow
(checked against SCALE-Sim 3.0.0, see tests/emulator/data/scalesim_results.jsonl):
  ws: ceil(K/R) * ceil(N/C) * (2R + C + M - 2) - 1
  os: ceil(M/R) * ceil(N/C) * (R + C + K - 2) - 1
  is: ceil(K/R) * ceil(M/C) * (2R + C + N - 2) - 1
Each fold preloads, streams, skews and drains with no overlap between folds; with
``weight_double_buffering`` the next fold's R-cycle preload hides under the current fold, so
every fold but the first is R cycles shorter.

Element types: ``macs_per_cycle`` gives MACs per PE per cycle for the operands' type; a rate r
streams the fold's streamed dimension (M for ws, K for os, N for is) r rows per cycle, so fills
and skews are not sped up. Rate 1.0 is SCALE-Sim's.

Cores: a GEMM is split over a pm x pn grid of cores (M into pm row blocks, N into pn column
blocks; a batch is first spread over cores), the grid with the fewest cycles on the busiest core
(ties: fewer cores). Operand traffic is bounded separately by HBM bandwidth (the kernel cost
model, emulator/kernels/library.py). Left out: SRAM capacity stalls, sparsity, split-K.
"""
from __future__ import annotations

from math import ceil

from emulator.config import MatrixEngineConfig
from emulator.tiles import Work, coarsen
from emulator.timeline import TimedEngine

_RATE_FIELD = {0: "int8", 1: "int8", 2: "int8", 3: "int32", 4: "int32", 5: "int32", 6: "float16",
               7: "bfloat16", 8: "float32", 9: "float64", 10: "int32", 11: "int32", 12: "int32",
               13: "float32", 14: "float64"}


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


def fold_shape(M: int, N: int, K: int, rows: int, cols: int, dataflow: str, rate: float = 1.0,
               double_buffered: bool = False):
    """(folds, cycles of one fold, cycles hidden per later fold by double buffering) of one GEMM on
    one array; total cycles = folds * fold - (folds - 1) * hidden - 1."""
    if dataflow == "ws":
        folds, fold = ceil(K / rows) * ceil(N / cols), 2 * rows + cols + ceil(M / rate) - 2
    elif dataflow == "os":
        folds, fold = ceil(M / rows) * ceil(N / cols), rows + cols + ceil(K / rate) - 2
    elif dataflow == "is":
        folds, fold = ceil(K / rows) * ceil(M / cols), 2 * rows + cols + ceil(N / rate) - 2
    else:
        raise ValueError(f"unknown dataflow {dataflow!r}")
    return folds, fold, (rows if double_buffered else 0)


def rate_field(dtype) -> str:
    return _RATE_FIELD.get(dtype, "float32") if dtype is not None else "float32"


class MatrixEngine(TimedEngine):
    """The matrix engines of a device's cores. They are booked together (a kernel spreads over
    the cores it uses), so they share one timeline; ``lanes`` names each core's engine."""

    def __init__(self, env, config: MatrixEngineConfig, clock_ghz: float, cores: int = 1,
                 device_index: int = 0):
        super().__init__(clock_ghz, cores)
        self.config = config
        self.cores = cores
        self.lane_names = tuple(f"dev{device_index}.core{i}.matrix" for i in range(cores))
        self._grids = sorted(((pm, pn) for pm in range(1, cores + 1) for pn in range(1, cores // pm + 1)),
                             key=lambda g: (g[0] * g[1], g))

    def gemm_ns(self, M: int, N: int, K: int) -> float:
        """One array, SCALE-Sim's cycles (the reference formula; kernels use ``gemm``)."""
        c = self.config
        return systolic_cycles(M, N, K, c.rows, c.cols, c.dataflow) / self.clock_ghz

    def rate(self, dtype) -> float:
        return getattr(self.config.macs_per_cycle, rate_field(dtype))

    def gemm(self, M: int, N: int, K: int, dtype=None, batch: int = 1, efficiency: float = 1.0,
             what: str = "gemm") -> Work:
        """Work of ``batch`` M x K @ K x N products spread over the cores."""
        c = self.config
        R, C = c.rows, c.cols
        if min(M, N, K, batch) <= 0:
            return Work(0.0, 0, 1, f"{what} (empty)", self.lane_names[:1], 1, 0.0, 0.0, "matrix")
        rate = self.rate(dtype)
        db = c.weight_double_buffering
        pb = min(batch, self.cores)
        per_batch_cores = self.cores // pb
        rounds = ceil(batch / pb)
        best = None
        for pm, pn in self._grids:
            if pm * pn > per_batch_cores:
                break
            if pm > M:
                continue
            Mc, Nc = ceil(M / pm), ceil(N / pn)
            if pm > 1 and (pm - 1) * Mc >= M or pn > 1 and (pn - 1) * Nc >= N:
                continue  # an idle core: that grid is really a smaller one
            folds, fold, hidden = fold_shape(Mc, Nc, K, R, C, c.dataflow, rate, db)
            cycles = rounds * (folds * fold - (folds - 1) * hidden) - 1
            # More cores must pay for themselves (5% fewer cycles), or the smaller grid stays.
            if best is None or cycles < best[0][0] * (0.95 if pm * pn > best[0][1] else 1.0):
                best = ((cycles, pm * pn), pm, pn, folds, fold, hidden)
        (cycles, used), pm, pn, folds, fold, hidden = best
        cores = used * pb
        per_core_folds = rounds * folds
        tiles = coarsen(per_core_folds)
        if c.efficiency != 1.0 or efficiency != 1.0:
            efficiency *= c.efficiency
            cycles = ceil(cycles / efficiency)
        ns = cycles / self.clock_ghz
        fill = hidden / (self.clock_ghz * efficiency)
        tile_ns = (ns - fill) / tiles
        streamed = {"ws": ceil(ceil(M / pm) / rate), "os": ceil(K / rate), "is": ceil(ceil(N / pn) / rate)}[c.dataflow]
        fixed = rounds * folds * max(0, fold - streamed) / (self.clock_ghz * efficiency)
        grid = f"{pb} batch x {pm}x{pn}" if pb > 1 else f"{pm}x{pn}"
        tiling = (f"{what} {grid} cores, {R}x{C} tiles ({c.dataflow}), "
                  f"{per_core_folds * cores} tiles")
        return Work(ns, cycles, cores, tiling, self.lane_names[:cores], tiles, tile_ns, fill, "matrix", fixed)
