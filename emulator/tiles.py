"""Work descriptions and the tile-level discrete-event model (``EMU_FIDELITY=tile``).

An engine call (``MatrixEngine.gemm``, ``VectorEngine.elementwise``) describes the compute
side of a kernel as ``Work``: the cores it runs on, the per-core compute time, and its tiles
(``tiles_per_core`` equal tiles of ``tile_ns`` each, after a ``fill_ns`` pipeline fill). The
kernel cost (emulator/kernels/library.py) combines it with the kernel's HBM traffic:

- kernel fidelity, analytical, with T tiles per core: ``max(latency + compute + stream / T,
  stream + compute / T)`` when the kernel double-buffers through the scratchpad (compute waits
  for the first wave of tiles; a stream hides the later loads' latency but not the last tile's
  compute), ``latency + compute + stream`` when it does not; stream = bytes / sustained bandwidth;
- tile fidelity, ``simulate_tiles``: a GEMM's own output tiles (``Work.tile_runs``) are dealt to
  the cores in waves, so a partial last wave runs on some cores only (with HBM to themselves);
  every piece of every tile is three events on the engines it uses: its operand load (the core's DMA queue, served by the shared HBM in the order requests
  become ready, arriving ``latency`` later), its compute on the core's engine, and its result
  store (posted). With double buffering a core loads ahead while it computes (as many tile
  buffers as cover the latency, at least two, at most what its scratchpad holds); without, one
  tile at a time. The kernel ends when the last store does.

The two agree when a kernel has many tiles per core: they differ by the pipeline's prologue and
epilogue (the first load and the last store are not hidden behind compute) and by how loads and
stores of different cores queue at HBM. A kernel with very few tiles (a tiny elementwise op) is
slower at tile fidelity by up to one tile's load + store. Tiles are coarsened to at most
``MAX_TILES_PER_CORE`` per core (the kernel's total work is unchanged) so that the event count
stays bounded.
"""
from __future__ import annotations

import heapq
from math import ceil
from typing import NamedTuple

MAX_TILES_PER_CORE = 32


class Work(NamedTuple):
    ns: float              # compute time of the busiest core (fill included)
    cycles: int            # the same in device clock cycles
    cores: int             # cores used
    tiling: str            # human-readable split
    lanes: tuple           # engine lane names occupied (one per core)
    tiles_per_core: int    # equal tiles each core computes in order
    tile_ns: float         # compute time of one tile
    fill_ns: float         # pipeline fill paid once per core before its first tile
    unit: str              # "matrix" | "vector"
    fixed_ns: float = 0.0  # the part of ns that does not grow with the data (fills, skews, drains)
    tile_runs: tuple = ()  # ((count, compute ns, steps), ...): the kernel's own tiles, dealt to the
                           # cores in waves (tile fidelity), each streamed in ``steps`` pieces;
                           # () = tiles_per_core equal tiles per core


def coarsen(units: int) -> int:
    """Tiles per core for ``units`` indivisible work units per core (folds, lane groups)."""
    return max(1, min(units, MAX_TILES_PER_CORE))


def simulate_tiles(work: Work, load_bytes: float, store_bytes: float, bytes_per_ns: float,
                   latency_ns: float, double_buffering: bool, sram_bytes: int = 1 << 62) -> float:
    """Tile-level discrete events of one kernel; returns its duration in ns.

    ``load_bytes``/``store_bytes`` are the kernel's whole HBM traffic, shared evenly by its tiles.
    HBM is one server at ``bytes_per_ns`` (its channels interleave every transfer), FIFO in the
    order transfers become ready. A load also pays ``latency_ns`` (pipelined: it delays that
    load's arrival, not the server); stores are posted. With double buffering a core keeps as
    many loads in flight as cover the latency (at least two tile buffers, at most what its
    ``sram_bytes`` scratchpad holds); without, one tile at a time.

    Tiles: with ``work.tile_runs`` (a GEMM's output tiles) the kernel's own tiles are dealt to
    the cores in waves, so in a partial last wave only some cores load, compute and store (the
    others are idle and leave HBM to them); otherwise every core has ``tiles_per_core`` equal
    tiles. A core with more than ``MAX_TILES_PER_CORE`` tiles runs them in that many coarser ones.
    """
    cores = max(1, work.cores)
    if work.tile_runs:
        total = sum(run[0] for run in work.tile_runs)
        work_ns = sum(run[0] * run[1] for run in work.tile_runs)
        steps = max(1, min(run[2] for run in work.tile_runs))   # a tile's own pipelined steps (folds)
        waves, extra = divmod(total, cores)
        # Core c takes tiles c, c + cores, ...: the first ``extra`` cores one more than the rest.
        per_core = [waves + (1 if c < extra else 0) for c in range(cores)]
        per_core = [n for n in per_core if n]
        unit_ns = work_ns / total
        # Within a tile its operand slabs stream in steps (double-buffered): n tiles are n x steps
        # pieces of load, compute and store, coarsened.
        counts = [min(n * steps, MAX_TILES_PER_CORE) for n in per_core]
        tile_ns = [unit_ns * n / m for n, m in zip(per_core, counts)]
        shares = [n / total for n in per_core]
        fill_ns = work.fill_ns
    else:
        counts = [work.tiles_per_core] * cores
        tile_ns = [work.tile_ns] * cores
        shares = [1.0 / cores] * cores
        fill_ns = work.fill_ns
    cores = len(counts)
    if bytes_per_ns <= 0 or (load_bytes == 0.0 and store_bytes == 0.0):
        # operands resident: the cores compute back to back
        return max(fill_ns + n * t for n, t in zip(counts, tile_ns))
    load_ns = [load_bytes * share / n / bytes_per_ns for share, n in zip(shares, counts)]
    store_ns = [store_bytes * share / n / bytes_per_ns for share, n in zip(shares, counts)]
    buffers = []
    for c in range(cores):
        if double_buffering:
            tile_bytes = (load_ns[c] + store_ns[c]) * bytes_per_ns
            fit = int(sram_bytes // tile_bytes) if tile_bytes else counts[c]
            t = tile_ns[c]
            buffers.append(max(2, min(fit, 1 + ceil((latency_ns + load_ns[c]) / t) if t > 0 else counts[c])))
        else:
            buffers.append(1)
    # Per core: compute_end[i]; loads wait for a free tile buffer.
    compute_end = [[0.0] * n for n in counts]
    hbm_free = 0.0
    # Events: (ready time, order, kind, core, tile); kind 0 = load request, 1 = store request.
    events = []
    order = 0
    for i in range(max(min(b, n) for b, n in zip(buffers, counts))):  # first tiles at once, round robin
        for c in range(cores):
            if i < min(buffers[c], counts[c]):
                events.append((0.0, order, 0, c, i))
                order += 1
    next_load = [min(b, n) for b, n in zip(buffers, counts)]
    heapq.heapify(events)
    end = 0.0
    while events:
        ready, _, kind, c, i = heapq.heappop(events)
        start = ready if ready > hbm_free else hbm_free
        hbm_free = start + (load_ns[c] if kind == 0 else store_ns[c])
        done = hbm_free + latency_ns if kind == 0 else hbm_free
        if kind == 0:
            # Compute tile i once loaded and once tile i-1's compute is done (fill before tile 0).
            prev = compute_end[c][i - 1] if i else fill_ns
            begin = done if done > prev else prev
            finish = compute_end[c][i] = begin + tile_ns[c]
            heapq.heappush(events, (finish, order, 1, c, i))
            order += 1
        else:
            if done > end:
                end = done
            # Tile i's buffer is free once its result is stored: the next load may start.
            j = next_load[c]
            if j < counts[c]:
                next_load[c] = j + 1
                heapq.heappush(events, (done if buffers[c] == 1 else compute_end[c][i], order, 0, c, j))
                order += 1
    return end
