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

Cores and waves: the output divides into tiles (``tile_shapes``: power-of-two multiples of the
array whose fp32 accumulators and double-buffered operand slabs fit a core's scratchpad; the
largest, for operand reuse, unless they would leave cores idle), clamped to the matrix. The tiles
of every product of a batch are dealt to the cores in waves: the busiest core runs
ceil(tiles / cores) tiles one after another, and an edge tile costs a full one (its program is the
tile's, its out-of-range rows and columns masked, as GPU GEMM kernels run), so a shape one past a
multiple of the tile pays the extra wave and a small GEMM runs on as many cores as it has tiles.
One core and one tile: SCALE-Sim's cycles exactly. Operand traffic is bounded separately by HBM
bandwidth (the kernel cost model, emulator/kernels/library.py). Left out: sparsity, split-K.
"""
from __future__ import annotations

from math import ceil

from emulator.config import MatrixEngineConfig
from emulator.tiles import Work, coarsen
from emulator.timeline import TimedEngine

_RATE_FIELD = {0: "int8", 1: "int8", 2: "int8", 3: "int32", 4: "int32", 5: "int32", 6: "float16",
               7: "bfloat16", 8: "float32", 9: "float64", 10: "int32", 11: "int32", 12: "int32",
               13: "float32", 14: "float64", 16: "float8", 17: "float8", 18: "float8", 19: "float8"}


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
    """The matrix engines of a device's cores (one timeline per core, ``CoreTimelines``);
    ``lane_names`` names each core's engine."""

    def __init__(self, env, config: MatrixEngineConfig, clock_ghz: float, cores: int = 1,
                 device_index: int = 0, scratchpad_bytes: int = 1 << 62):
        super().__init__(clock_ghz, cores)
        self.config = config
        self.cores = cores
        self.scratchpad_bytes = scratchpad_bytes
        self.lane_names = tuple(f"dev{device_index}.core{i}.matrix" for i in range(cores))
        self._shapes: dict = {}   # operand itemsize -> tile shapes that fit a core

    def gemm_ns(self, M: int, N: int, K: int) -> float:
        """One array, SCALE-Sim's cycles (the reference formula; kernels use ``gemm``)."""
        c = self.config
        return systolic_cycles(M, N, K, c.rows, c.cols, c.dataflow) / self.clock_ghz

    def rate(self, dtype) -> float:
        return getattr(self.config.macs_per_cycle, rate_field(dtype))

    def tile_shapes(self, dtype=None) -> tuple:
        """(largest, all): the output tile shapes (tm, tn) a core can take, power-of-two multiples
        of its array whose fp32 accumulators and double-buffered operand slabs (``rows`` deep) fit
        its scratchpad; ``largest`` are those of the largest area (the array itself always fits)."""
        itemsize = _ITEMSIZE.get(rate_field(dtype), 4)
        hit = self._shapes.get(itemsize)
        if hit is not None:
            return hit
        R, C = self.config.rows, self.config.cols
        shapes = [(R, C)]
        for i in range(MAX_TILE_DOUBLINGS):
            for j in range(MAX_TILE_DOUBLINGS):
                tm, tn = R << i, C << j
                if (i or j) and 4 * tm * tn + 2 * (tm + tn) * R * itemsize <= self.scratchpad_bytes:
                    shapes.append((tm, tn))
        area = max(tm * tn for tm, tn in shapes)
        hit = self._shapes[itemsize] = (tuple(s for s in shapes if s[0] * s[1] == area), tuple(shapes))
        return hit

    def tile_shape(self, M: int, N: int, dtype=None) -> tuple:
        """The output tile (tm, tn, clamped to the matrix) ``gemm`` gives each core for M x N."""
        return self._plan(M, N, 1, dtype)[1]

    def _tile_cycles(self, em, en, K, rate):
        c = self.config
        folds, fold, hidden = fold_shape(em, en, K, c.rows, c.cols, c.dataflow, rate, c.weight_double_buffering)
        return folds * fold - (folds - 1) * hidden, folds, fold, hidden

    def _plan(self, M, N, batch, dtype, K=None):
        """(cycles of the busiest core + 1, (em, en), tiles, waves, cores used, folds per tile, fold,
        hidden) of the best tiling: the largest tiles (the most operand reuse per byte loaded), or,
        when those leave cores idle, any tile shape; a shape on more cores must save 5% of the
        cycles. Tiles are clamped to the matrix (a small GEMM gets a tile of its own size)."""
        K = K if K is not None else max(M, N)
        rate = self.rate(dtype)
        largest, shapes = self.tile_shapes(dtype)
        cores = self.cores
        candidates = []
        for group in (largest, shapes):
            for tm, tn in group:
                em, en = min(tm, M), min(tn, N)
                tiles = batch * -(-M // em) * -(-N // en)
                candidates.append((min(tiles, cores), -em * en, em, en, tiles))
            if min(c[4] for c in candidates) >= cores:
                break   # the largest tiles already give every core a tile
        best = None
        for used, _, em, en, tiles in sorted(set(candidates)):
            waves = -(-tiles // cores)
            per_tile, folds, fold, hidden = self._tile_cycles(em, en, K, rate)
            cycles = waves * per_tile
            if best is None or cycles < best[0] * (0.95 if used > best[4] else 1.0):
                best = (cycles, (em, en), tiles, waves, used, folds, fold, hidden)
        return best

    def gemm(self, M: int, N: int, K: int, dtype=None, batch: int = 1, efficiency: float = 1.0,
             what: str = "gemm") -> Work:
        """Work of ``batch`` M x K @ K x N products: output tiles (``tile_shapes``) dealt to the
        cores in waves; the busiest core runs ``waves`` tiles one after another."""
        c = self.config
        R, C = c.rows, c.cols
        if min(M, N, K, batch) <= 0:
            return Work(0.0, 0, 1, f"{what} (empty)", self.lane_names[:1], 1, 0.0, 0.0, "matrix")
        rate = self.rate(dtype)
        busiest, (em, en), tiles, waves, cores, folds, fold, hidden = self._plan(M, N, batch, dtype, K)
        cycles = busiest - 1
        per_core_folds = waves * folds
        if c.efficiency != 1.0 or efficiency != 1.0:
            efficiency *= c.efficiency
            cycles = ceil(cycles / efficiency)
        ns = cycles / self.clock_ghz
        fill = hidden / (self.clock_ghz * efficiency)
        coarse = coarsen(per_core_folds)
        tile_ns = (ns - fill) / coarse
        streamed = {"ws": ceil(em / rate), "os": ceil(K / rate), "is": ceil(en / rate)}[c.dataflow]
        fixed = per_core_folds * max(0, fold - streamed) / (self.clock_ghz * efficiency)
        tiling = (f"{what} {tiles} tiles of {em}x{en} in {waves} waves on {cores} cores, "
                  f"{R}x{C} arrays ({c.dataflow}), {per_core_folds * cores} folds")
        # The tile fidelity deals the tiles themselves: ``tiles`` equal tiles (an edge tile is a full
        # tile's program with its out-of-range rows and columns masked, as GPU GEMM kernels run it).
        runs = ((tiles, (ns - fill) / waves, folds),)
        return Work(ns, cycles, cores, tiling, self.lane_names[:cores], coarse, tile_ns, fill, "matrix", fixed,
                    runs)


MAX_TILE_DOUBLINGS = 8   # tiles up to 256 arrays along each side
_ITEMSIZE = {"int8": 1, "int32": 4, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8": 1}

