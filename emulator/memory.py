"""The memory hierarchy's traffic: what a kernel's operands move between HBM, the device's shared
on-chip cache (``[device.cache]``, an L2) and the cores' scratchpads.

Everything here follows from shapes, strides and address ranges, never from values, so a cost is
the same whether or not a kernel computes. The kernel library's cost functions call it; the
result's ``hbm`` bytes are what the roofline streams through HBM, its ``cache`` bytes what the
cache must deliver to the cores (``bandwidth_bytes_per_cycle``).

- **Lines and sectors.** Elementwise and copy kernels walk the output in its memory order (no
  scratchpad tiling of a transposed source). An input whose stride along that walk is wider than
  one element moves a sector per element (or its stride, when narrower than a sector) from the
  cache. HBM sees each sector once when the lines one sweep touches stay in the cache until the
  next sweep uses their neighbours (the sweep's lines, for every core, fit its capacity), and once
  per element when they do not. An operand with holes (a strided slice) moves the sectors its
  elements lie in, holes included.
- **Gathers** (index_select, embedding, gather, index, paged KV reads) move whole sectors: a
  gathered row of the table costs its sectors (one more when rows are not sector-aligned), a
  gathered single element one sector. A table that fits the cache is read from HBM at most once.
- **GEMM tiling.** Each core computes a Tm x Tn output tile (the largest whose fp32 accumulator
  and double-buffered K-slices of A and B fit its scratchpad), so the cache delivers A once per
  column of tiles and B once per row of tiles. Operands that fit the cache together are read from
  HBM once; otherwise the cache holds a block of A rows and B columns (at least the tiles one wave
  of cores computes together), and HBM delivers A once per block column, B once per block row.
- **Aliasing.** Inputs with the same descriptor (``x + x``) are read once; inputs whose address
  ranges overlap are read at most as their union. A write is never merged with a read: an
  in-place ``x += y`` still reads x and writes it back. Cost-only callers must give distinct
  operands distinct addresses (address 0 is a real one: projection mode's first block).

Left out: replacement policy and conflict misses (the cache behaves as fully associative LRU),
reuse between kernels (each kernel starts cold), write-allocate fills, split-K, and L2 partitions.
"""
from __future__ import annotations

from math import ceil, isqrt
from typing import NamedTuple

from emulator.kernels import dtypes


class Traffic(NamedTuple):
    hbm: int     # bytes between HBM and the cache (read + written)
    cache: int   # bytes between the cache and the cores' scratchpads
    store: int   # bytes of ``hbm`` that are written


def span(o) -> tuple | None:
    """[lo, hi) bytes ``o`` lies in, or None when it is empty."""
    if 0 in o.shape:
        return None
    last = 0
    for n, s in zip(o.shape, o.strides):
        last += (n - 1) * abs(s)
    return o.addr, o.addr + (last + 1) * dtypes.ITEMSIZE[o.dtype]


def alias_key(operands) -> tuple:
    """What of the operands' addresses a cost depends on: the relative offset of every pair whose
    address ranges overlap (the cost cache's key must hold it, as costs are keyed by shapes)."""
    spans = [span(o) if hasattr(o, "strides") and hasattr(o, "addr") else None for o in operands]
    key = []
    for i, a in enumerate(spans):
        if a is None:
            continue
        for j in range(i + 1, len(spans)):
            b = spans[j]
            if b is not None and a[0] < b[1] and b[0] < a[1]:
                key.append((i, j, b[0] - a[0]))
    return tuple(key)


def _inner_dim(o) -> int | None:
    """The dimension ``o`` is walked along innermost: its smallest nonzero stride of extent > 1."""
    best = None
    for d, (n, s) in enumerate(zip(o.shape, o.strides)):
        if n > 1 and s and (best is None or abs(s) < abs(o.strides[best])):
            best = d
    return best


def footprint(o, sector: int) -> int:
    """Bytes of the sectors ``o``'s elements lie in. A contiguous run of the whole operand counts
    its bytes (its last partial sector is not charged); a strided operand's runs are rounded up."""
    nbytes = o.nbytes
    d = _inner_dim(o)
    if d is None or not nbytes:
        return nbytes
    item = dtypes.ITEMSIZE[o.dtype]
    step = abs(o.strides[d]) * item
    elements = nbytes // item
    if step > item:        # no two elements adjacent: each takes its stride, at most a sector
        return elements * min(step, sector)
    run = o.shape[d] * item
    if _dense(o):
        return nbytes
    return elements // o.shape[d] * -(-run // sector) * sector


def _dense(o) -> bool:
    """``o`` covers its address range without holes (a permutation of a contiguous block)."""
    expected = 1
    for n, s in sorted(((n, abs(s)) for n, s in zip(o.shape, o.strides) if n > 1 and s), key=lambda p: p[1]):
        if s != expected:
            return False
        expected *= n
    return True


def walked(o, order, cache, cores: int) -> tuple:
    """(HBM bytes, cache bytes) of reading ``o`` in the order of ``order`` (the kernel's output:
    its innermost dimension is the walk's)."""
    sector = cache.sector_bytes
    base = footprint(o, sector)
    d = _inner_dim(order) if order is not None and len(order.shape) == len(o.shape) else None
    if d is None or not base:
        return base, base
    item = dtypes.ITEMSIZE[o.dtype]
    step = abs(o.strides[d]) * item
    if step <= item:
        return base, base
    per_access = o.nbytes // item * min(step, sector)
    if per_access <= base:
        return base, base
    sweep = o.shape[d] * min(step, cache.line_bytes)
    if sweep * cores <= cache.capacity_bytes:
        return base, per_access     # the next sweeps find their neighbours in the cache
    return per_access, per_access


def elementwise(device, out, inputs) -> Traffic:
    """Traffic of a kernel that walks ``out`` in its memory order, writing it and reading
    ``inputs`` (operands it also writes, as an optimizer's state, are counted as reads)."""
    cache = device.config.cache
    cores = device.config.cores
    hbm, moved = walked(out, None, cache, cores)
    store = hbm
    reads = []
    for o in inputs:
        if o.nbytes and o not in reads:    # the same descriptor is read once
            reads.append(o)
    costs = [walked(o, out, cache, cores) for o in reads]
    for group in _overlapping(reads):
        members = [costs[i] for i in group]
        h = sum(m[0] for m in members)
        if len(group) > 1:   # overlapping ranges: their union crosses HBM (at least the largest)
            h = max(max(m[0] for m in members), min(h, _union_bytes([span(reads[i]) for i in group])))
        hbm += h
        moved += sum(m[1] for m in members)
    return Traffic(hbm, max(moved, hbm), store)


def _overlapping(operands) -> list:
    """Index groups of operands whose address ranges overlap (transitively)."""
    groups, spans = [], [span(o) for o in operands]
    for i, s in enumerate(spans):
        hit = None
        if s is not None:
            for g in groups:
                if any(spans[j] is not None and s[0] < spans[j][1] and spans[j][0] < s[1] for j in g):
                    hit = g
                    break
        if hit is None:
            groups.append([i])
        else:
            hit.append(i)
    return groups


def _union_bytes(spans) -> int:
    total, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo >= end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


# -- gathers ------------------------------------------------------------------------------------

def gathered(device, table, shape, iter_strides, index_strides, index_dims) -> tuple:
    """(HBM bytes, cache bytes) of touching one table element per element of ``shape`` (walked in
    C order): table[p . iter_strides + sum_k idx_k[p] * table.strides[dim_k]]."""
    cache = device.config.cache
    sector = cache.sector_bytes
    item = dtypes.ITEMSIZE[table.dtype]
    n = 1
    for e in shape:
        n *= e
    if not n:
        return 0, 0
    d = max((i for i, e in enumerate(shape) if e > 1), default=None)
    rows = d is not None and abs(iter_strides[d]) == 1 and all(s[d] == 0 for s in index_strides)
    if rows:   # the walk's inner dimension is not indexed: a gathered row is contiguous
        run = shape[d] * item
        pitch_aligned = all(table.strides[k] * item % sector == 0 for k in index_dims)
        per_run = -(-run // sector) + (0 if pitch_aligned and run % sector == 0 else 1)
        per_run = min(per_run, shape[d])
        touched = n // shape[d] * per_run * sector
    else:      # every element is its own access
        touched = n * max(item, sector)
    if table.nbytes <= cache.capacity_bytes:
        return min(touched, footprint(table, sector)), touched
    return touched, touched


def rows_gathered(device, table, rows: int) -> int:
    """Bytes of gathering ``rows`` whole rows (the last dimension) of a 2-D ``table``."""
    sector = device.config.cache.sector_bytes
    item = dtypes.ITEMSIZE[table.dtype]
    run = table.shape[-1] * item
    aligned = table.strides[0] * item % sector == 0 and run % sector == 0
    return rows * (-(-run // sector) + (0 if aligned else 1)) * sector


# -- GEMM tiling ------------------------------------------------------------------------------

def gemm_tile(device, M: int, N: int, K: int, dtype: int) -> tuple:
    """(Tm, Tn): the output tile one core keeps in its scratchpad: an fp32 (fp64 for 64-bit types)
    accumulator plus the (double-)buffered K-slices of A and B, K-slices as deep as the array's
    rows. Tiles are multiples of the array and never smaller than it (or than M, N)."""
    cfg = device.config
    pad, arr = cfg.scratchpad, cfg.matrix_engine
    item = dtypes.ITEMSIZE[dtype]
    acc = 8 if item >= 8 else 4
    b = (2 if pad.double_buffering else 1) * arr.rows * item
    S = pad.bytes_per_core
    T = int((-b + (b * b + acc * S) ** 0.5) / acc)

    def fit(other):   # the longest side that fits next to a side of ``other``
        return int((S - b * other) / (acc * other + b)) if S > b * other else 0

    def clip(t, n, step):
        t = t // step * step
        return min(n, max(t, step))

    Tm = clip(T, M, arr.rows)
    Tn = clip(fit(Tm), N, arr.cols)
    if Tn == N:
        Tm = clip(fit(Tn), M, arr.rows)
    return Tm, Tn


def gemm(device, M: int, N: int, K: int, a, b, out, c=None, batch: int = 1) -> Traffic:
    """Traffic of ``batch`` M x K @ K x N products (a, b, out, c: the operands, over the batch)."""
    cfg = device.config
    ab, bb, ob = a.nbytes, b.nbytes, out.nbytes
    cb = c.nbytes if c is not None else 0
    once = ab + bb + ob + cb
    if cfg.scratchpad.operands_resident or not min(M, N, K, batch):
        return Traffic(once, once, ob)
    sector = cfg.cache.sector_bytes
    ab, bb = ab * _tile_factor(a, sector), bb * _tile_factor(b, sector)
    Tm, Tn = gemm_tile(device, M, N, K, a.dtype)
    tiles_m, tiles_n = -(-M // Tm), -(-N // Tn)
    cached = ab * tiles_n + bb * tiles_m + ob + cb
    # Items of a batch run side by side when one needs fewer cores than the device has.
    together = max(1, min(batch, cfg.cores // (tiles_m * tiles_n)))
    capacity = cfg.cache.capacity_bytes
    item_bytes = (ab + bb + ob + cb) / batch
    aliased = span(a) == span(b)
    if item_bytes * together <= capacity:
        reads = ab + (0 if aliased else bb)
        return Traffic(reads + ob + cb, cached, ob)
    cap = capacity / together
    concurrent = min(tiles_m * tiles_n, cfg.cores)
    if concurrent == tiles_m * tiles_n:   # one wave computes every tile
        gm, gn = tiles_m, tiles_n
    else:
        gm = min(tiles_m, max(1, isqrt(concurrent)))
        gn = min(tiles_n, concurrent // gm)
    wave_m, wave_n = min(M, gm * Tm), min(N, gn * Tn)
    row_a, col_b = ab / (batch * M), bb / (batch * N)    # bytes of one A row, one B column (K long)
    square = int(cap / (row_a + col_b)) if row_a + col_b else M
    blocks = [(min(M, max(square, wave_m)), min(N, max(square, wave_n)))]
    if M * row_a < cap:
        blocks.append((M, min(N, max(wave_n, int((cap - M * row_a) / col_b)))))
    if N * col_b < cap:
        blocks.append((min(M, max(wave_m, int((cap - N * col_b) / row_a))), N))
    best = None
    for wm, wn in blocks:
        ra, rb = min(-(-N // wn), tiles_n), min(-(-M // wm), tiles_m)
        reads = ab * ra + bb * rb
        best = reads if best is None or reads < best else best
    return Traffic(int(best) + ob + cb, int(cached), ob)


def _tile_factor(o, sector: int) -> float:
    """A GEMM loads its operands in tiles: an operand with a unit (or zero) stride among its two
    matrix dimensions loads whole runs; one without moves a sector per element."""
    item = dtypes.ITEMSIZE[o.dtype]
    inner = [abs(s) for n, s in zip(o.shape[-2:], o.strides[-2:]) if n > 1]
    if not inner or min(inner) <= 1:
        return 1
    return min(min(inner) * item, sector) / item
