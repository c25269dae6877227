"""The device's kernel library: each kernel's functional body and cost model.

A kernel is named in a launch command. Firmware resolves the command's tensor
descriptors to ``Operand``s (host pointers into HBM after MMU translation) and
asks this table which engine runs the kernel, how long it takes, and then runs
the functional body, a Cython routine that reads and writes device memory.

The cost model (``_roofline``): the engine work of the kernel (``Work``: cores, tiles,
compute time; emulator/matrix_engine.py, emulator/vector_engine.py) against its HBM traffic.
Kernel fidelity: ``max(compute, memory)`` when it double-buffers through the scratchpad, their
sum when not; tile fidelity: the tile-level events of emulator/tiles.py. A cost function
returns a ``Cost``; ``bound`` names the term that limited it. Operands broadcast with stride 0
are counted at their real (deduplicated) size.
"""
from __future__ import annotations

import array
import functools
import importlib
from dataclasses import dataclass
from math import prod
from typing import Callable, NamedTuple

from emulator import memory
from emulator.errors import KernelArgumentError
from emulator.kernels import dtypes
from emulator.tiles import Work, simulate_tiles


class Operand(NamedTuple):
    addr: int            # host pointer of element [0, ..., 0]
    dtype: int           # emulator.kernels.dtypes code
    shape: tuple
    strides: tuple       # in elements

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the operand really occupies: a dimension broadcast with stride 0 counts once."""
        n = 1
        for extent, stride in zip(self.shape, self.strides):
            if stride:
                n *= extent
            elif not extent:
                return 0
        return n * dtypes.ITEMSIZE[self.dtype]


class Cost(NamedTuple):
    """What a kernel costs (a cost function's result)."""
    ns: float             # modelled duration on its engines (launch overhead not included)
    nbytes: int           # HBM bytes read + written
    flops: int
    bound: str = "compute"   # "compute" | "memory" | "latency": the term that limited max()
    cycles: int = 0       # ns in device clock cycles
    cores: int = 1        # cores it ran on
    tiling: str = ""      # human-readable work split
    engines: tuple = ()   # lane names it occupies
    cache_bytes: int = 0  # bytes the on-chip cache delivered to the cores (emulator/memory.py)


@dataclass(frozen=True)
class Kernel:
    name: str
    engine: str                          # "vector" | "matrix"
    # run(*args) on resolved operands. A run may carry ``run.bind(*args)``: a callable of no
    # arguments that does what run(*args) does, with the operands' fields already read (the
    # firmware decodes a repeated launch once and keeps it). A kernel given another run loses it.
    run: Callable
    cost: Callable                       # cost(device, *args) -> Cost


_loaded: dict = {}


def _module(name: str):
    # Imported on first launch so that importing the emulator needs no compiled code.
    module = _loaded.get(name)
    if module is None:
        module = _loaded[name] = importlib.import_module(f"emulator.kernels.{name}")
    return module


def _roofline(device, work: Work, nbytes: int, flops: int, store_bytes: int | None = None,
              cache_bytes: int | None = None) -> Cost:
    """The kernel's cost from its engine work and its HBM traffic (``store_bytes`` of it written;
    unknown: a third, as for a binary elementwise op) and the bytes the on-chip cache delivers to
    the cores (``cache_bytes``; unknown: the HBM bytes, each crossing the cache once)."""
    pad = device.config.scratchpad
    hbm = device.hbm
    compute = work.ns
    cached = nbytes if cache_bytes is None else cache_bytes
    # The engines read their operands from, and write results to, the scratchpad: its bandwidth
    # bounds the compute side (it matters when operands are resident, or HBM is very fast).
    sram = cached / (work.cores * pad.bandwidth_bytes_per_cycle * device.config.clock_ghz)
    sram_bound = sram > compute
    if sram_bound:
        tiles = work.tiles_per_core
        work = work._replace(ns=sram, tile_ns=(sram - work.fill_ns) / tiles)
        compute = sram
    if pad.operands_resident or not nbytes:
        stream = latency = 0.0
    else:
        # The stream is HBM's, or the cache's where it delivers more bytes than its bandwidth
        # moves in that time (re-read tiles, a sector per strided element).
        stream, latency = nbytes / hbm.bytes_per_ns, hbm.config.latency_ns
        cache = cached / (device.config.cache.bandwidth_bytes_per_cycle * device.config.clock_ghz)
        stream = cache if cache > stream else stream
    store = nbytes // 3 if store_bytes is None else min(store_bytes, nbytes)
    if device.fidelity == "tile":
        moved = 0 if pad.operands_resident else nbytes
        rate = nbytes / stream if stream else hbm.bytes_per_ns
        ns = simulate_tiles(work, moved - store if moved else 0, store if moved else 0, rate,
                            latency, pad.double_buffering, pad.bytes_per_core)
    elif pad.double_buffering:
        # A pipeline over the cores' tiles: compute waits for the first wave of tiles (latency + one
        # tile per core), the stream hides the later loads' latency and the last tile's compute.
        # The last load arrives a latency after the loads' stream; only stores can hide it.
        tiles = work.tiles_per_core
        loads = stream * (nbytes - store) / nbytes if nbytes else 0.0
        head = latency + compute + stream / tiles
        tail = (stream if stream > latency + loads else latency + loads) + compute / tiles
        ns = head if head > tail else tail
    else:
        ns = latency + compute + stream
    if stream >= compute + latency:
        bound = "memory"
    elif latency > compute or work.fixed_ns * 2 > compute:
        bound = "latency"
    else:
        bound = "memory" if sram_bound else "compute"   # scratchpad bandwidth is a memory term
    engines = work.lanes + (hbm.lane,) if stream else work.lanes
    return Cost(ns, nbytes, flops, bound, round(ns * device.config.clock_ghz), work.cores, work.tiling, engines,
                cached)


def _vector_cost(cycles_per_group: float, flops_per_element: int = 1):
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        out = operands[0]
        traffic = memory.elementwise(device, out, operands[1:])
        return _roofline(device, device.vector_engine.elementwise(out.numel, cycles_per_group, out.dtype),
                         traffic.hbm, out.numel * flops_per_element, traffic.store, traffic.cache)
    return cost


def _skip_op_name(cost):
    """Cost of a kernel whose first argument names the operation (e.g. "add")."""
    return lambda device, op, *rest: cost(device, *rest)


def _copy(dst: Operand, src: Operand):
    _module('strided').copy_cast(dst.addr, dst.dtype, dst.strides, src.addr, src.dtype, src.strides, dst.shape)


def _fill(dst: Operand, value):
    _module('strided').fill(dst.addr, dst.dtype, dst.strides, dst.shape, value)


def _immediate(value, dtype: int, ndim: int):
    """A scalar launch argument as an operand: ``value`` cast to ``dtype`` (with the device's cast
    rules: the copy kernel's, as from an int64/float64/bool register) in a one-element scratch
    buffer, read with stride 0 on every dimension. Returns (buffer, operand); keep the buffer."""
    kind = type(value)
    if kind is bool:
        source, register = dtypes.BOOL, array.array("B", [value])
    elif kind is int:
        if not -(1 << 63) <= value < (1 << 63):
            raise KernelArgumentError(f"immediate {value} does not fit a 64-bit integer register")
        source, register = dtypes.INT64, array.array("q", [value])
    elif kind is float:
        source, register = dtypes.FLOAT64, array.array("d", [value])
    else:
        raise KernelArgumentError(f"an immediate operand must be a bool, int or float, got {value!r}")
    scratch = array.array("q", [0])
    dst = scratch.buffer_info()[0]
    _module('strided').copy_cast(dst, dtype, (1,), register.buffer_info()[0], source, (1,), (1,))
    return scratch, Operand(dst, dtype, (1,) * ndim, (0,) * ndim)


def _binary(op: str, out: Operand, a, b, compute_dtype: int, alpha):
    """``a`` or ``b`` may be an immediate (a Python number): it is cast to the compute dtype."""
    ndim = len(out.shape)
    if type(a) is not Operand:
        keep_a, a = _immediate(a, compute_dtype, ndim)
    if type(b) is not Operand:
        keep_b, b = _immediate(b, compute_dtype, ndim)
    _module('elementwise').binary(op, out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides,
                                  b.addr, b.dtype, b.strides, out.shape, compute_dtype, alpha)


# Vector-engine cycles per element group for the table-driven pointwise kernels: 1 for plain
# arithmetic, comparisons and selects; more for division, square roots and transcendental
# functions, which the engine evaluates as polynomial sequences.
_TRANSCENDENTAL = {"exp": 8, "exp2": 8, "expm1": 9, "log": 8, "log2": 8, "log10": 9, "log1p": 9, "sqrt": 4,
                   "rsqrt": 4, "sin": 10, "cos": 10, "tan": 14, "asin": 14, "acos": 14, "atan": 12,
                   "sinh": 12, "cosh": 12, "tanh": 10, "asinh": 14, "acosh": 14, "atanh": 14, "sigmoid": 10,
                   "erf": 12, "erfc": 12, "lgamma": 24, "reciprocal": 4, "silu": 10, "gelu": 14,
                   "gelu_tanh": 14, "mish": 20, "softplus": 18, "elu": 10, "sinc": 14, "logit": 12,
                   "pow": 16, "atan2": 14, "hypot": 6, "fmod": 6, "remainder": 6, "div_trunc": 4,
                   "div_floor": 6, "xlogy": 10, "xlog1py": 10, "logaddexp": 18, "logaddexp2": 18,
                   "sigmoid_backward": 2, "tanh_backward": 2, "silu_backward": 12, "gelu_backward": 16,
                   "gelu_tanh_backward": 16, "elu_backward": 10, "softplus_backward": 12, "mish_backward": 24,
                   "logit_backward": 4, "lerp": 2, "addcmul": 2, "addcdiv": 4,
                   # special functions (_special_math.pxi): the polynomial/Chebyshev terms they sum
                   # at ~1-2 cycles each plus their exp/log/sin; the iterative ones (incomplete
                   # gamma, zeta, the n-step polynomial recurrences) at a typical iteration count
                   "digamma": 30, "polygamma": 120, "erfinv": 40, "i0": 40, "i0e": 34, "i1": 40, "i1e": 34,
                   "ndtri": 30, "log_ndtr": 30, "erfcx": 30, "entr": 10, "airy_ai": 60, "bessel_j0": 40,
                   "bessel_j1": 40, "bessel_y0": 50, "bessel_y1": 50, "modified_bessel_k0": 60,
                   "modified_bessel_k1": 60, "scaled_modified_bessel_k0": 60, "scaled_modified_bessel_k1": 60,
                   "spherical_bessel_j0": 14, "igamma": 300, "igammac": 300, "zeta": 120,
                   "chebyshev_polynomial_t": 24, "chebyshev_polynomial_u": 24, "chebyshev_polynomial_v": 24,
                   "chebyshev_polynomial_w": 24, "shifted_chebyshev_polynomial_t": 24,
                   "shifted_chebyshev_polynomial_u": 24, "shifted_chebyshev_polynomial_v": 24,
                   "shifted_chebyshev_polynomial_w": 24, "hermite_polynomial_h": 24, "hermite_polynomial_he": 24,
                   "laguerre_polynomial_l": 30, "legendre_polynomial_p": 30, "softshrink": 2, "log_sigmoid": 18,
                   "log_sigmoid_backward": 14, "frexp_mantissa": 2, "frexp_exponent": 2, "nextafter": 2,
                   "prelu_grad_input": 2}


def pointwise_cycles(op: str) -> float:
    return float(_TRANSCENDENTAL.get(op, 1))


def _pointwise_run(arity: int):
    """run(op, out, *inputs, compute_dtype, common_dtype, *params): inputs are operands or immediates
    (Python numbers, cast first to the operands' common dtype, as CPU casts a scalar operand)."""
    entry = ("unary_op", "binary_op", "ternary_op")[arity - 1]

    def run(op, out, *rest):
        inputs, (compute_dtype, common_dtype), params = rest[:arity], rest[arity:arity + 2], rest[arity + 2:]
        ndim = len(out.shape)
        keep, triples = [], []
        for x in inputs:
            if type(x) is not Operand:
                buffer, x = _immediate(x, common_dtype, ndim)
                keep.append(buffer)
            triples.append((x.addr, x.dtype, x.strides))
        getattr(_module('pointwise'), entry)(op, (out.addr, out.dtype, out.strides), *triples, out.shape,
                                             compute_dtype, params)
    return run


def _pointwise_cost(arity: int):
    def cost(device, op, out, *rest):
        traffic = memory.elementwise(device, out, [x for x in rest[:arity] if type(x) is Operand])
        cycles = pointwise_cycles(op)
        return _roofline(device, device.vector_engine.elementwise(out.numel, cycles, out.dtype), traffic.hbm,
                         out.numel * max(1, int(cycles)), traffic.store, traffic.cache)
    return cost


def _bind_binary(op: str, out: Operand, a, b, compute_dtype: int, alpha):
    """_binary with its operands read once: the compiled kernel itself, no Python frame per run."""
    if type(out) is not Operand or type(a) is not Operand or type(b) is not Operand:
        return functools.partial(_binary, op, out, a, b, compute_dtype, alpha)  # an immediate's register lives per run
    return functools.partial(_module('elementwise').binary, op, out.addr, out.dtype, out.strides, a.addr, a.dtype,
                             a.strides, b.addr, b.dtype, b.strides, out.shape, compute_dtype, alpha)


def _bind_unary(op: str, out: Operand, a: Operand, compute_dtype: int):
    if type(out) is not Operand or type(a) is not Operand:
        return functools.partial(_unary, op, out, a, compute_dtype)
    return functools.partial(_module('elementwise').unary, op, out.addr, out.dtype, out.strides, a.addr, a.dtype,
                             a.strides, out.shape, compute_dtype)


def _unary(op: str, out: Operand, a: Operand, compute_dtype: int):
    _module('elementwise').unary(op, out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides,
                        out.shape, compute_dtype)


_binary.bind = _bind_binary
_unary.bind = _bind_unary


def _threshold_backward(out: Operand, grad: Operand, x: Operand, compute_dtype: int, threshold):
    _module('elementwise').threshold_backward(out.addr, out.dtype, out.strides, grad.addr, grad.dtype,
                                              grad.strides, x.addr, x.dtype, x.strides, out.shape,
                                              compute_dtype, threshold)


def _sum(out: Operand, inp: Operand, dim_mask: int, compute_dtype: int):
    """``out`` is described in keepdim form (extent 1 on the reduced dims); bit d of
    ``dim_mask`` set = dimension d is reduced (launch arguments are scalars or tensors)."""
    dims = tuple(d for d in range(len(inp.shape)) if dim_mask >> d & 1)
    _module('reduction').reduce_sum(out.addr, out.dtype, out.strides, inp.addr, inp.dtype, inp.strides,
                                    inp.shape, dims, compute_dtype)


def _sum_cost(device, out: Operand, inp: Operand, dim_mask, compute_dtype):
    # One add per input element on the vector engine; HBM streams the input once and the output once.
    moved = inp.nbytes + out.nbytes
    return _roofline(device, device.vector_engine.elementwise(inp.numel, 1.0, inp.dtype, "reduce"), moved,
                     inp.numel, out.nbytes)


def _matmul(out: Operand, a: Operand, b: Operand, c: Operand | None, beta: float, alpha: float):
    M, K = a.shape
    N = b.shape[1]
    if c is None:
        c_addr, c_dtype, c_strides = 0, out.dtype, (0, 0)
    else:
        c_addr, c_dtype, c_strides = c.addr, c.dtype, c.strides
    _module('gemm').matmul(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides,
                         b.addr, b.dtype, b.strides, M, N, K, beta, c_addr, c_dtype, c_strides, alpha)


def _matmul_cost(device, out, a, b, c, beta, alpha):
    M, K = a.shape
    N = b.shape[1]
    traffic = memory.gemm(device, M, N, K, a, b, out, c)
    return _roofline(device, device.matrix_engine.gemm(M, N, K, a.dtype), traffic.hbm, 2 * M * N * K,
                     traffic.store, traffic.cache)


def _uniform(out: Operand, seed: int, offset: int, low: float, high: float):
    _module('random').uniform(out.addr, out.dtype, out.strides, out.shape, seed, offset, low, high)


def _normal(out: Operand, seed: int, offset: int, mean: float, std: float):
    _module('random').normal(out.addr, out.dtype, out.strides, out.shape, seed, offset, mean, std)


def _randint(out: Operand, seed: int, offset: int, low: int, high: int):
    _module('random').randint(out.addr, out.dtype, out.strides, out.shape, seed, offset, low, high)


def _bernoulli(out: Operand, seed: int, offset: int, p: Operand | None, p_scalar: float):
    if p is None:
        p_addr, p_dtype, p_strides = 0, dtypes.FLOAT32, out.strides
    else:
        p_addr, p_dtype, p_strides = p.addr, p.dtype, p.strides
    _module('random').bernoulli(out.addr, out.dtype, out.strides, out.shape, seed, offset,
                            p_addr, p_dtype, p_strides, p_scalar)


def _arange(out: Operand, n: int, start, step):
    _module("sequence").arange(out.addr, out.dtype, out.strides[0], n, start, step)


def _linspace(out: Operand, steps: int, start: float, end: float):
    _module("sequence").linspace(out.addr, out.dtype, out.strides[0], steps, start, end)


def _log_softmax(out: Operand, inp: Operand, dim: int):
    _module('softmax').log_softmax(out.addr, out.dtype, out.strides, inp.addr, inp.dtype, inp.strides,
                                   inp.shape, dim)


def _log_softmax_backward(grad_input: Operand, grad_output: Operand, output: Operand, dim: int):
    _module('softmax').log_softmax_backward(grad_input.addr, grad_input.dtype, grad_input.strides,
                                            grad_output.addr, grad_output.dtype, grad_output.strides,
                                            output.addr, output.dtype, output.strides, grad_input.shape, dim)


def _nll_operands(inp: Operand, target: Operand, weight: Operand | None):
    """(N, C) view of a 2-D input; a 1-D input is described by the host as (1, C) with stride 0."""
    n, c = inp.shape
    w = (0, dtypes.FLOAT32, 0) if weight is None else (weight.addr, weight.dtype, weight.strides[0])
    return n, c, w


def _nll_loss(out: Operand, total_weight: Operand, inp: Operand, target: Operand, weight: Operand | None,
              mode: int, ignore_index: int):
    """``mode``: 0 = a loss per sample (``out`` is (N,)), 1 = mean, 2 = sum (``out`` is a scalar
    described as (1,))."""
    n, c, (w_addr, w_dtype, w_stride) = _nll_operands(inp, target, weight)
    _module('losses').nll_loss_forward(out.addr, out.dtype, out.strides[0], total_weight.addr, total_weight.dtype,
                                       inp.addr, inp.dtype, inp.strides[0], inp.strides[1],
                                       target.addr, target.strides[0], w_addr, w_dtype, w_stride,
                                       n, c, mode, ignore_index)


def _nll_loss_backward(grad_input: Operand, grad_output: Operand, target: Operand, weight: Operand | None,
                       total_weight: Operand, mode: int, ignore_index: int):
    n, c, (w_addr, w_dtype, w_stride) = _nll_operands(grad_input, target, weight)
    _module('losses').nll_loss_backward(grad_input.addr, grad_input.dtype, grad_input.strides[0],
                                        grad_input.strides[1], grad_output.addr, grad_output.dtype,
                                        grad_output.strides[0], target.addr, target.strides[0],
                                        w_addr, w_dtype, w_stride, total_weight.addr, total_weight.dtype,
                                        n, c, mode, ignore_index)


def _nll_loss_cost(device, *args):
    # Gathers one input element per sample: bytes = the gathered input, targets, weights read,
    # outputs written; a few vector cycles per sample.
    out, tw, inp, target, weight = args[:5]
    n = inp.shape[0]
    item = dtypes.ITEMSIZE[inp.dtype]
    moved = n * item + target.nbytes + (n * dtypes.ITEMSIZE[weight.dtype] if weight is not None else 0) \
        + out.nbytes + tw.nbytes
    return _roofline(device, device.vector_engine.elementwise(n, 4.0), moved, 2 * n)


def _nll_loss_backward_cost(device, grad_input, grad_output, target, weight, total_weight, *rest):
    # Zero-fills grad_input and scatters one value per sample.
    n = grad_input.shape[0]
    moved = grad_input.nbytes + grad_output.nbytes + target.nbytes + total_weight.nbytes \
        + (n * dtypes.ITEMSIZE[weight.dtype] if weight is not None else 0)
    return _roofline(device, device.vector_engine.elementwise(grad_input.numel + n, 1.0), moved,
                     grad_input.numel)


def _bmm(out: Operand, a: Operand, b: Operand, c: Operand | None, beta, alpha):
    """out[b] = beta * C[b] + alpha * A[b] @ B[b] (bmm, baddbmm); all operands 3-D."""
    batch, M, K = a.shape
    N = b.shape[2]
    c_addr, c_dtype, c_strides = (0, out.dtype, (0, 0, 0)) if c is None else (c.addr, c.dtype, c.strides)
    _module('gemm').bmatmul(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides, b.addr, b.dtype,
                            b.strides, batch, M, N, K, beta, c_addr, c_dtype, c_strides, alpha, False)


def _addbmm(out: Operand, a: Operand, b: Operand, c: Operand | None, beta, alpha):
    """out = beta * C + alpha * sum_b A[b] @ B[b]; out and C are 2-D."""
    batch, M, K = a.shape
    N = b.shape[2]
    c_addr, c_dtype, c_strides = (0, out.dtype, (0, 0)) if c is None else (c.addr, c.dtype, c.strides)
    _module('gemm').bmatmul(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides, b.addr, b.dtype,
                            b.strides, batch, M, N, K, beta, c_addr, c_dtype, c_strides, alpha, True)


def _bmm_cost(device, out, a, b, c, beta, alpha):
    batch, M, K = a.shape
    N = b.shape[2]
    traffic = memory.gemm(device, M, N, K, a, b, out, c, batch)
    return _roofline(device, device.matrix_engine.gemm(M, N, K, a.dtype, batch, what="bmm"), traffic.hbm,
                     2 * batch * M * N * K, traffic.store, traffic.cache)


def _addr(out: Operand, c: Operand | None, v1: Operand, v2: Operand, beta, alpha, compute_dtype: int):
    """out = beta * C + alpha * outer(v1, v2), computed in ``compute_dtype`` (C not read if beta == 0)."""
    M, N = out.shape
    c_addr, c_dtype, c_strides = (0, out.dtype, (0, 0)) if c is None else (c.addr, c.dtype, c.strides)
    _module('gemm').addr(out.addr, out.dtype, out.strides, c_addr, c_dtype, c_strides, v1.addr, v1.dtype,
                         v1.strides[0], v2.addr, v2.dtype, v2.strides[0], M, N, beta, alpha, compute_dtype)


def _reduce(op: str, out: Operand, aux: Operand | None, inp: Operand, dim_mask: int, compute_dtype: int,
            param: float):
    """The generic reduction (see reduction.pyx: reduce): ``out`` (and ``aux``, the indices of
    max/min or the mean of var/std, or None) in keepdim form; bit d of ``dim_mask`` set =
    dimension d is reduced; ``param``: var/std's correction or norm's order."""
    dims = tuple(d for d in range(len(inp.shape)) if dim_mask >> d & 1)
    if aux is None:
        aux_addr, aux_dtype, aux_strides = 0, dtypes.INT64, ()
    else:
        aux_addr, aux_dtype, aux_strides = aux.addr, aux.dtype, aux.strides
    _module('reduction').reduce(op, out.addr, out.dtype, out.strides, aux_addr, aux_dtype, aux_strides,
                                inp.addr, inp.dtype, inp.strides, inp.shape, dims, compute_dtype, float(param))


# Vector cycles per input element and flops per element of each reduction (two passes for
# var/std/logsumexp; a pow, exp or log costs a few cycles more).
_REDUCE_CYCLES = {"var": 2.0, "std": 2.0, "logsumexp": 6.0, "norm": 2.0}


def _reduce_cost(device, op, out: Operand, aux, inp: Operand, dim_mask, compute_dtype, param):
    # HBM streams the input once per pass and each output once.
    passes = 2 if op in ("var", "std", "logsumexp") else 1
    moved = passes * inp.nbytes + out.nbytes + (aux.nbytes if aux is not None else 0)
    cycles = _REDUCE_CYCLES.get(op, 1.0)
    return _roofline(device, device.vector_engine.elementwise(inp.numel, cycles), moved,
                     int(inp.numel * cycles))


def _scan(op: str, out: Operand, inp: Operand, dim: int, compute_dtype: int):
    _module('reduction').scan(op, out.addr, out.dtype, out.strides, inp.addr, inp.dtype, inp.strides,
                              inp.shape, dim, compute_dtype)


def _im2col(col: Operand, x: Operand, *params):
    """``col`` is (C, kD, kH, kW, oD, oH, oW), ``x`` is (C, D, H, W); ``params`` = the 9 ints
    (stride, padding, dilation per spatial dim) -- launch arguments are scalars."""
    _module('convolution').im2col(col.addr, col.dtype, col.strides, col.shape, x.addr, x.dtype, x.strides, x.shape,
                           params)


def _im2col_cost(device, col: Operand, x: Operand, *params):
    # A gather (DMA-like): every column entry is written once, the image is streamed once.
    moved = col.nbytes + x.nbytes
    return _roofline(device, device.vector_engine.elementwise(col.numel, 1.0, col.dtype, "im2col"), moved, 0,
                     col.nbytes)


def _col2im(out: Operand, col: Operand, bias: Operand | None, *params):
    b_addr, b_dtype, b_stride = (0, dtypes.FLOAT32, 0) if bias is None else (bias.addr, bias.dtype, bias.strides[0])
    _module('convolution').col2im(out.addr, out.dtype, out.strides, out.shape, col.addr, col.dtype, col.strides,
                           col.shape, b_addr, b_dtype, b_stride, params)


def _col2im_cost(device, out: Operand, col: Operand, bias, *params):
    # One add per column entry into the image (held in scratchpad), then the image is written once.
    moved = col.nbytes + out.nbytes + (bias.nbytes if bias is not None else 0)
    return _roofline(device, device.vector_engine.elementwise(col.numel + out.numel, 1.0), moved, col.numel)


def _depthwise_conv(out: Operand, x: Operand, w: Operand, bias: Operand | None, *params):
    """out (N, O, oD, oH, oW) = depthwise convolution of x (N, C, D, H, W) with w (O, kD, kH, kW)."""
    _module('convolution').depthwise_conv(_pool_args(out), _pool_args(x), _pool_args(w),
                                   None if bias is None else (bias.addr, bias.dtype, bias.strides[0]), params)


def _depthwise_conv_input_grad(grad_input: Operand, grad_output: Operand, w: Operand, *params):
    _module('convolution').depthwise_conv_input_grad(_pool_args(grad_input), _pool_args(grad_output), _pool_args(w),
                                              params)


def _depthwise_conv_weight_grad(grad_weight: Operand, grad_output: Operand, x: Operand, *params):
    _module('convolution').depthwise_conv_weight_grad(_pool_args(grad_weight), _pool_args(grad_output), _pool_args(x),
                                               params)


def _depthwise_cost(grid_operand: int, weight_operand: int):
    """Cost of a depthwise launch: a multiply-add per (position of the result grid, tap) on the
    vector engine, the grid being operand ``grid_operand`` (the forward's output, the gradients'
    grad_output) and the taps those of the (O, kD, kH, kW) weight operand ``weight_operand``;
    HBM streams every operand once."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        grid, weight = args[grid_operand], args[weight_operand]
        work = grid.numel * prod(weight.shape[1:])
        return _roofline(device, device.vector_engine.elementwise(work, 1.0, grid.dtype, "depthwise_conv"),
                         sum(o.nbytes for o in operands), 2 * work, args[0].nbytes)
    return cost


def _pool_args(op: Operand):
    return op.addr, op.dtype, op.strides, op.shape


def _window_cost(reads_per_output):
    """Cost of a windowed kernel (pooling, upsampling): ``reads_per_output(*args)`` inputs are read per
    element of the first operand (a backward pass scatters as many); HBM streams every operand once."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        moved = sum(o.nbytes for o in operands)
        work = max(o.numel for o in operands) * reads_per_output(*args)
        return _roofline(device, device.vector_engine.elementwise(work, 1.0), moved, work)
    return cost


def _softmax(out: Operand, inp: Operand, dim: int, safe: bool = False):
    """``safe``: rows of only -inf give zeros (aten::_safe_softmax)."""
    _module('norm').softmax(out.addr, out.dtype, out.strides, inp.addr, inp.dtype, inp.strides, inp.shape, dim,
                            safe)


def _softmax_backward(grad_input: Operand, grad_output: Operand, output: Operand, dim: int):
    _module('norm').softmax_backward(grad_input.addr, grad_input.dtype, grad_input.strides,
                                     grad_output.addr, grad_output.dtype, grad_output.strides,
                                     output.addr, output.dtype, output.strides, grad_input.shape, dim)


def _norm_operand(o: Operand | None):
    return None if o is None else (o.addr, o.dtype, o.strides)


def _norm_forward(y: Operand, x: Operand, w, b, mean_out, rstd_out, mean_in, var_in, run_mean, run_var,
                  n_outer: int, eps: float, momentum: float, center: bool, round_stats: bool):
    """Layer/group/batch/RMS norm forward over ``x.shape`` (see norm.pyx): statistics over the
    dims after the first ``n_outer``; parameters broadcast with stride 0."""
    ops = [_norm_operand(o) for o in (y, x, w, b, mean_out, rstd_out, mean_in, var_in, run_mean, run_var)]
    _module('norm').norm_forward(*ops, x.shape, n_outer, eps, momentum, center, round_stats)


def _norm_backward(dx, dw, db, dy: Operand, x: Operand, w, mean, rstd, n_outer: int, eps: float,
                   center: bool, batch_stats: bool, rstd_is_var: bool):
    ops = [_norm_operand(o) for o in (dx, dw, db, dy, x, w, mean, rstd)]
    _module('norm').norm_backward(*ops, x.shape, n_outer, eps, center, batch_stats, rstd_is_var)


def _distinct_nbytes(o: Operand | None) -> int:
    """Bytes of the elements an operand really holds (a broadcast dimension, stride 0, counts once)."""
    if o is None:
        return 0
    return prod(n for n, s in zip(o.shape, o.strides) if s != 0) * dtypes.ITEMSIZE[o.dtype]


def _norm_cost(cycles_per_element: float, flops_per_element: int):
    """Statistics and the normalization stream the row through the scratchpad: HBM moves each
    operand once (broadcast parameters once), the vector engine makes a few passes."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        n = max(o.numel for o in operands)
        moved = sum(_distinct_nbytes(o) for o in operands)
        return _roofline(device, device.vector_engine.elementwise(n, cycles_per_element), moved,
                         n * flops_per_element)
    return cost


# -- indexing.pyx, masking.pyx, layout.pyx, sorting.pyx: wrappers. Variadic launch arguments carry
# what a descriptor cannot: the table's iteration strides and (operand, dim) per index.

def _index_groups(rest, nidx: int, ndim: int):
    """(table iteration strides, [(addr, dtype, strides, dim)]) from the variadic tail."""
    strides = tuple(rest[:ndim])
    pairs = rest[ndim:]
    indices = [(pairs[2 * k].addr, pairs[2 * k].dtype, pairs[2 * k].strides, pairs[2 * k + 1]) for k in range(nidx)]
    return strides, indices


def _index_gather(out: Operand, table: Operand, allow_negative: bool, message: str, nidx: int, *rest):
    """out[p] = table[p . iter_strides + sum_k idx_k[p] * table.strides[dim_k]]."""
    strides, indices = _index_groups(rest, nidx, len(out.shape))
    _module('indexing').index_gather(out.addr, out.dtype, out.strides, table.addr, table.shape, table.strides,
                                     strides, out.shape, indices, allow_negative, message)


def _index_scatter(table: Operand, values, reduce: int, alpha, include_self: bool, allow_negative: bool,
                   message: str, nidx: int, *rest):
    """Iterates over the first index operand's shape; ``values`` may be an immediate (a scalar)."""
    shape = rest[len(rest) - 2 * nidx].shape
    strides, indices = _index_groups(rest, nidx, len(shape))
    if type(values) is not Operand:
        keep, values = _immediate(values, table.dtype, len(shape))
    _module('indexing').index_scatter(table.addr, table.dtype, table.shape, table.strides, strides,
                                      values.addr, values.dtype, values.strides, shape, indices, reduce, alpha,
                                      include_self, allow_negative, message)


def _indexed_cost(device, table: Operand, nidx: int, rest, other: int, rmw: bool):
    # Per iterated element (the index operands' shape): its index values are read, one table
    # element is touched, by sectors (emulator/memory.py: a gathered row moves its sectors, a
    # scattered element one), and ``other`` bytes of the other side (out, values) stream; a
    # reducing scatter reads its sectors and writes them back. A few vector cycles go to address
    # generation. The table is not streamed whole.
    shape = rest[len(rest) - 2 * nidx].shape
    iter_strides = rest[:len(shape)]
    pairs = rest[len(shape):]
    indices = [pairs[2 * k] for k in range(nidx)]
    n = prod(shape)
    hbm, cached = memory.gathered(device, table, shape, iter_strides, [i.strides for i in indices],
                                  [pairs[2 * k + 1] for k in range(nidx)])
    side = sum(o.nbytes for o in indices) + other
    table_moves = 2 if rmw else 1
    return _roofline(device, device.vector_engine.elementwise(n, 3.0), table_moves * hbm + side, n, None,
                     table_moves * cached + side)


def _index_gather_cost(device, out, table, allow_negative, message, nidx, *rest):
    return _indexed_cost(device, table, nidx, rest, out.nbytes, False)


def _index_scatter_cost(device, table, values, reduce, alpha, include_self, allow_negative, message, nidx, *rest):
    other = values.nbytes if type(values) is Operand else 0
    return _indexed_cost(device, table, nidx, rest, other, reduce != 0)


def _where(out: Operand, cond: Operand, a, b, compute_dtype: int):
    ndim = len(out.shape)
    if type(a) is not Operand:
        keep_a, a = _immediate(a, compute_dtype, ndim)
    if type(b) is not Operand:
        keep_b, b = _immediate(b, compute_dtype, ndim)
    _module('masking').where(out.addr, out.dtype, out.strides, cond.addr, cond.dtype, cond.strides,
                             a.addr, a.dtype, a.strides, b.addr, b.dtype, b.strides, out.shape, compute_dtype)


def _count_nonzero(out: Operand, src: Operand):
    _module('masking').count_nonzero(out.addr, src.addr, src.dtype, src.strides, src.shape)


def _nonzero(out: Operand, src: Operand, rows: int):
    _module('masking').nonzero(out.addr, out.strides, rows, src.addr, src.dtype, src.strides, src.shape)


def _masked_select(out: Operand, src: Operand, mask: Operand, rows: int):
    _module('masking').masked_select(out.addr, out.strides[0] if out.strides else 1, rows, src.addr, src.dtype,
                                     src.strides, mask.addr, mask.dtype, mask.strides, src.shape)


def _masked_scatter(out: Operand, mask: Operand, source: Operand):
    _module('masking').masked_scatter(out.addr, out.dtype, out.strides, mask.addr, mask.dtype, mask.strides,
                                      source.addr, source.strides[0], source.numel, out.shape)


def _flip(out: Operand, src: Operand, dim_mask: int):
    _module('layout').flip(out.addr, out.dtype, out.strides, src.addr, src.strides, out.shape, dim_mask)


def _sub_operand(o: Operand, starts, shape) -> Operand:
    """The block of ``o`` starting at index ``starts`` with extents ``shape`` (a view)."""
    offset = sum(i * s for i, s in zip(starts, o.strides)) * dtypes.ITEMSIZE[o.dtype]
    return Operand(o.addr + offset, o.dtype, tuple(shape), o.strides)


def _roll(out: Operand, src: Operand, *shifts):
    """out[p] = src[(p_d - shifts[d]) mod n_d]: 2 block copies per rolled dim."""
    blocks = [((0,) * len(out.shape), (0,) * len(out.shape), tuple(out.shape))]
    for d, shift in enumerate(shifts):
        n = out.shape[d]
        s = shift % n if n else 0
        if s == 0:
            continue
        split = []
        for dst_at, src_at, shape in blocks:
            for dst0, src0, extent in ((s, 0, n - s), (0, n - s, s)):
                split.append((dst_at[:d] + (dst0,) + dst_at[d + 1:], src_at[:d] + (src0,) + src_at[d + 1:],
                              shape[:d] + (extent,) + shape[d + 1:]))
        blocks = split
    copy = _module('strided').copy_cast
    for dst_at, src_at, shape in blocks:
        dst, s = _sub_operand(out, dst_at, shape), _sub_operand(src, src_at, shape)
        copy(dst.addr, dst.dtype, dst.strides, s.addr, s.dtype, s.strides, shape)


def _cat(out: Operand, dim: int, *inputs):
    """Each input (cast to out's dtype) into its slice of ``out`` along ``dim``, in order."""
    copy = _module('strided').copy_cast
    at = 0
    zeros = (0,) * len(out.shape)
    for t in inputs:
        extent = t.shape[dim]
        if extent and t.numel:
            dst = _sub_operand(out, zeros[:dim] + (at,) + zeros[dim + 1:], t.shape)
            copy(dst.addr, dst.dtype, dst.strides, t.addr, t.dtype, t.strides, t.shape)
        at += extent
    if at != out.shape[dim]:
        raise KernelArgumentError(f"cat: inputs cover {at} of the output's {out.shape[dim]} rows on dim {dim}")


def _tril_triu(out: Operand, src: Operand, diagonal: int, upper: bool):
    _module('layout').tril_triu(out.addr, out.dtype, out.strides, src.addr, src.strides, out.shape, diagonal, upper)


def _pad(out: Operand, src: Operand, mode: int, *pads_before):
    _module('layout').pad(out.addr, out.strides, src.addr, src.strides, out.dtype, out.shape, src.shape,
                          pads_before, mode, False)


def _pad_backward(grad_input: Operand, grad_output: Operand, mode: int, *pads_before):
    _module('layout').pad(grad_output.addr, grad_output.strides, grad_input.addr, grad_input.strides,
                          grad_input.dtype, grad_output.shape, grad_input.shape, pads_before, mode, True)


def _sort(values: Operand, indices: Operand, src: Operand, dim: int, descending: bool, algorithm: int = 0):
    """``algorithm``: 0 stable; 1 CPU's std::sort; 2/3 CPU's topk selection, sorted/unsorted."""
    _module('sorting').sort(values.addr, values.strides, indices.addr, indices.strides, src.addr, src.dtype,
                            src.strides, src.shape, dim, descending, values.shape[dim], algorithm)


def _sort_cost(device, values, indices, src, dim, descending, algorithm=0):
    # A merge sort per slice: n log2(n) compare-and-move steps on the vector engine.
    n = max(src.shape[dim], 1)
    steps = src.numel * max(1, (n - 1).bit_length())
    moved = src.nbytes + values.nbytes + indices.nbytes
    return _roofline(device, device.vector_engine.elementwise(steps, 2.0), moved, steps)


def _embedding_dense_backward(grad_weight: Operand, grad: Operand, indices: Operand, padding_idx: int,
                              scale_grad_by_freq: bool):
    """``grad`` is described as (N, D), ``indices`` as (N,)."""
    n, d = grad.shape
    _module('indexing').embedding_dense_backward(grad_weight.addr, grad_weight.dtype, grad_weight.strides,
                                                 grad.addr, grad.strides, indices.addr, indices.dtype,
                                                 indices.strides[0], n, d, grad_weight.shape[0], padding_idx,
                                                 scale_grad_by_freq)


def _embedding_backward_cost(device, grad_weight, grad, indices, *rest):
    moved = grad_weight.nbytes * 2 + grad.nbytes + indices.nbytes
    return _roofline(device, device.vector_engine.elementwise(grad_weight.numel + grad.numel, 1.0), moved,
                     grad.numel)


def _data_dependent_cost(device, *args):
    # Reads every element of the inputs once, writes the outputs.
    moved = sum(a.nbytes for a in args if isinstance(a, Operand))
    n = max(a.numel for a in args if isinstance(a, Operand))
    return _roofline(device, device.vector_engine.elementwise(n, 1.0), moved, 0)


def _nll_loss2d(out: Operand, total_weight: Operand, inp: Operand, target: Operand, weight: Operand | None,
                mode: int, ignore_index: int):
    """(N, C, H, W) input, (N, H, W) target; ``out`` is (N, H, W) for mode 0, else a scalar as (1,)."""
    n, c, h, w = inp.shape
    w_addr, w_dtype, w_stride = (0, dtypes.FLOAT32, 0) if weight is None else \
        (weight.addr, weight.dtype, weight.strides[0])
    _module('losses').nll_loss2d_forward(out.addr, out.dtype, out.strides if mode == 0 else (0, 0, 0),
                                         total_weight.addr, total_weight.dtype, inp.addr, inp.dtype, inp.strides,
                                         target.addr, target.strides, w_addr, w_dtype, w_stride, n, c, h, w,
                                         mode, ignore_index)


def _nll_loss2d_backward(grad_input: Operand, grad_output: Operand, target: Operand, weight: Operand | None,
                         total_weight: Operand, mode: int, ignore_index: int):
    n, c, h, w = grad_input.shape
    w_addr, w_dtype, w_stride = (0, dtypes.FLOAT32, 0) if weight is None else \
        (weight.addr, weight.dtype, weight.strides[0])
    _module('losses').nll_loss2d_backward(grad_input.addr, grad_input.dtype, grad_input.strides, grad_output.addr,
                                          grad_output.dtype, grad_output.strides if mode == 0 else (0, 0, 0),
                                          target.addr, target.strides, w_addr, w_dtype, w_stride,
                                          total_weight.addr, total_weight.dtype, n, c, h, w, mode, ignore_index)


def _nll_loss2d_cost(device, out, tw, inp, target, weight, *rest):
    n = target.numel
    moved = n * dtypes.ITEMSIZE[inp.dtype] + target.nbytes + out.nbytes + tw.nbytes \
        + (n * dtypes.ITEMSIZE[weight.dtype] if weight is not None else 0)
    return _roofline(device, device.vector_engine.elementwise(n, 4.0), moved, 2 * n)


def _nll_loss2d_backward_cost(device, grad_input, grad_output, target, weight, total_weight, *rest):
    n = target.numel
    moved = grad_input.nbytes + grad_output.nbytes + target.nbytes + total_weight.nbytes \
        + (n * dtypes.ITEMSIZE[weight.dtype] if weight is not None else 0)
    return _roofline(device, device.vector_engine.elementwise(grad_input.numel + n, 1.0), moved,
                     grad_input.numel)


def _loss_operand(o: Operand | None):
    return None if o is None else (o.addr, o.dtype, o.strides)


def _pointwise_loss(op: int, out: Operand, x: Operand, y: Operand, w: Operand | None, pos_weight: Operand | None,
                    mode: int, param: float):
    """Every operand is described at the loss's shape (``x``'s); ``out`` with zero strides for mean/sum."""
    _module('losses').pointwise_loss(op, _loss_operand(out), _loss_operand(x), _loss_operand(y), _loss_operand(w),
                                     _loss_operand(pos_weight), x.shape, mode, param)


def _pointwise_loss_backward(op: int, grad_input: Operand, grad_output: Operand, x: Operand, y: Operand,
                             w: Operand | None, mode: int, param: float):
    _module('losses').pointwise_loss_backward(op, _loss_operand(grad_input), _loss_operand(grad_output),
                                              _loss_operand(x), _loss_operand(y), _loss_operand(w), grad_input.shape,
                                              mode, param)


def _pointwise_loss_cost(device, op, out, x, *rest):
    # A few vector cycles per element (logs for the cross entropies); each operand streamed once
    # (a broadcast operand is counted at the loss's shape: an upper bound).
    operands = [o for o in (out, x) + rest if isinstance(o, Operand)]
    moved = sum(o.nbytes for o in operands)
    return _roofline(device, device.vector_engine.elementwise(x.numel, 8.0), moved, 6 * x.numel)


# -- wrappers: FFT (fft.pyx)
def _fft_dims(dim_mask: int, last: int) -> tuple:
    """The transformed dims from a launch's scalars: bit d of ``dim_mask`` = dim d is transformed;
    ``last`` (also in the mask) is the real/half dim of r2c/c2r and is transformed last."""
    return tuple(d for d in range(dim_mask.bit_length()) if dim_mask >> d & 1 and d != last) + (last,)


def _fft(kind: int, out: Operand, inp: Operand, dim_mask: int, last: int, forward: bool, scale: float):
    """``kind``: 0 c2c, 1 r2c (forward), 2 c2r (inverse); ``scale``: the normalization factor."""
    _module('fft').fft(kind, out.addr, out.dtype, out.strides, out.shape, inp.addr, inp.dtype, inp.strides,
                       inp.shape, _fft_dims(dim_mask, last), forward, scale)


def _fft_cost(device, kind, out, inp, dim_mask, last, forward, scale):
    # 5 n log2(n) flops per complex line of length n, for every line of every transformed dim
    # (the signal extents are the complex side's: the input of c2c/c2r, the full real extent of r2c),
    # on the vector engine at one flop per lane-cycle; HBM streams the input and the output once.
    from math import log2
    signal = out if kind == 2 else inp
    lines_numel = max(inp.numel, out.numel)
    flops = 0
    for d in _fft_dims(dim_mask, last):
        n = signal.shape[d]
        if n > 1:
            flops += 5 * lines_numel * log2(n)
    flops = int(flops)
    return _roofline(device, device.vector_engine.elementwise(flops, 1.0), inp.nbytes + out.nbytes, flops)


def _complex_parts(mode: int, out: Operand, a: Operand, b: Operand):
    """``mode`` 0: out = a + ib (aten::complex); 1: out = a cos(b) + i a sin(b) (aten::polar)."""
    _module('fft').complex_parts(mode, out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides, b.addr,
                                 b.dtype, b.strides, out.shape)


def _complex_parts_cost(device, mode, out, a, b):
    # complex: a pass that interleaves the parts; polar: a cos and a sin (polynomial sequences, as
    # the transcendental ops') and two multiplies per element.
    cycles, flops = (20.0, 22) if mode == 1 else (1.0, 0)
    return _vector_cost(cycles, flops)(device, out, a, b)


def _complex_mul(out: Operand, a: Operand, b: Operand):
    _module('fft').complex_mul(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides, b.addr, b.dtype,
                               b.strides, out.shape)




# -- wrappers: LAPACK linear algebra (lapack.pyx)
# LAPACK kernels take their operands with the batch shape first; ``nb`` (the number of batch
# dimensions, a launch immediate) says where the matrix dimensions start. Broadcast batch
# dimensions arrive as 0 strides. Cost: the flop counts of LAPACK Working Note 41 (multiply and
# add counted separately), run on the matrix engine as one square GEMM of the same flop count
# per batch entry, at _LAPACK_EFFICIENCY of its modelled rate (panel factorisations, pivot
# searches and the QR/eigen/SVD reduction sweeps are latency-bound, not systolic), plus the HBM
# traffic of every operand once. Constants: LU 2/3 n^3 (square), QR 2 M k^2 - 2/3 k^3, Cholesky
# and LDL^T 1/3 n^3, triangular/LU/Cholesky solves 2 n^2 nrhs, eigh 9 n^3 with vectors (4/3 n^3
# without), eig 25 n^3 with vectors (10 n^3 without), SVD 6 M k^2 + 20 k^3 with vectors
# (4 M k^2 - 4/3 k^3 without), least squares a QR plus 4 m n nrhs.
_LAPACK_EFFICIENCY = 0.5


def _lapack(name: str):
    def run(nb, *operands_and_params):
        operands = [o for o in operands_and_params if isinstance(o, Operand)]
        batch = tuple(operands[0].shape[:nb])
        getattr(_module('lapack'), name)(batch, *operands_and_params)
    return run


def _lapack_cost(flops_of):
    """flops_of(*args) -> flops of one batch entry; the first operand's batch counts entries."""
    def cost(device, nb, *args):
        operands = [o for o in args if isinstance(o, Operand)]
        count = prod(operands[0].shape[:nb])
        flops = int(count * flops_of(*args))
        edge = max(1, round((flops / max(count, 1) / 2) ** (1 / 3))) if flops else 0
        work = device.matrix_engine.gemm(edge, edge, edge, operands[0].dtype, count, _LAPACK_EFFICIENCY,
                                         "lapack") if edge else device.matrix_engine.gemm(0, 0, 0)
        return _roofline(device, work, sum(o.nbytes for o in operands), flops)
    return cost


def _mn(op: Operand):
    return op.shape[-2], op.shape[-1]


def _lu_flops(m, n):
    k = min(m, n)
    return 2 * m * n * k - (m + n) * k * k + 2 * k ** 3 / 3


def _qr_flops(m, n):
    k = min(m, n)
    return 2 * max(m, n) * k * k - 2 * k ** 3 / 3


def _solve_flops(a, rhs, *rest):
    return 2 * a.shape[-1] ** 2 * rhs.shape[-1]


def _qr_cost_flops(a, Q, R, tau, qcols, rrows):
    m, n = _mn(a)
    k = min(m, n)
    return _qr_flops(m, n) + (4 * m * qcols * k - 2 * (m + qcols) * k * k + 4 * k ** 3 / 3 if Q is not None and R is not None else 0)


def _svd_flops(a, U, S, Vh, full):
    m, n = _mn(a)
    k, big = min(m, n), max(m, n)
    return 6 * big * k * k + 20 * k ** 3 if U is not None else 4 * big * k * k - 4 * k ** 3 / 3


def _gels_flops(a, rhs, *rest):
    m, n = _mn(a)
    return 2 * _qr_flops(m, n) + 4 * m * n * rhs.shape[-1]


_LAPACK_KERNELS = (
    Kernel("getrf", "matrix", _lapack("getrf"), _lapack_cost(lambda a, *r: _lu_flops(*_mn(a)))),
    Kernel("getrs", "matrix", _lapack("getrs"), _lapack_cost(lambda lu, piv, rhs, *r: 2 * lu.shape[-1] ** 2 * rhs.shape[-1])),
    Kernel("lu_unpack", "vector", _lapack("lu_unpack"), _lapack_cost(lambda lu, *r: 0)),
    Kernel("lu_det", "vector", _lapack("lu_det"), _lapack_cost(lambda lu, *r: 2 * lu.shape[-1])),
    Kernel("potrf", "matrix", _lapack("potrf"), _lapack_cost(lambda a, *r: a.shape[-1] ** 3 / 3)),
    Kernel("potrs", "matrix", _lapack("potrs"), _lapack_cost(_solve_flops)),
    Kernel("potri", "matrix", _lapack("potri"), _lapack_cost(lambda a, *r: 2 * a.shape[-1] ** 3 / 3)),
    Kernel("sytrf", "matrix", _lapack("sytrf"), _lapack_cost(lambda a, *r: a.shape[-1] ** 3 / 3)),
    Kernel("sytrs", "matrix", _lapack("sytrs"), _lapack_cost(lambda a, piv, rhs, *r: 2 * a.shape[-1] ** 2 * rhs.shape[-1])),
    Kernel("qr", "matrix", _lapack("qr"), _lapack_cost(_qr_cost_flops)),
    Kernel("orgqr", "matrix", _lapack("orgqr"),
           _lapack_cost(lambda a, tau, out: 4 * a.shape[-2] * a.shape[-1] * tau.shape[-1]
                        - 2 * (a.shape[-2] + a.shape[-1]) * tau.shape[-1] ** 2 + 4 * tau.shape[-1] ** 3 / 3)),
    Kernel("ormqr", "matrix", _lapack("ormqr"),
           _lapack_cost(lambda a, tau, c, out, left, tr: 4 * c.shape[-2] * c.shape[-1] * tau.shape[-1])),
    Kernel("syevd", "matrix", _lapack("syevd"),
           _lapack_cost(lambda a, w, v, up: (9 if v is not None else 4 / 3) * a.shape[-1] ** 3)),
    Kernel("gesdd", "matrix", _lapack("gesdd"), _lapack_cost(_svd_flops)),
    Kernel("geev", "matrix", _lapack("geev"),
           _lapack_cost(lambda a, w, v: (25 if v is not None else 10) * a.shape[-1] ** 3)),
    Kernel("trsm", "matrix", _lapack("trsm"),
           _lapack_cost(lambda a, rhs, *r: a.shape[-1] * rhs.shape[-2] * rhs.shape[-1])),   # m^2 n (left), m n^2 (right)
    Kernel("gels", "matrix", _lapack("gels"), _lapack_cost(_gels_flops)),
)


# -- wrappers: selection, scans, searching, histograms (selection.pyx, binning.pyx, segment.pyx)
def _order_stat(op: str, values: Operand, indices: Operand | None, src: Operand, dim_mask: int, k: int):
    """median / nanmedian / kthvalue / mode over the dims of ``dim_mask`` (bit d = dim d reduced);
    ``values`` / ``indices`` in keepdim form; ``indices`` None for the full median."""
    dims = tuple(d for d in range(len(src.shape)) if dim_mask >> d & 1)
    idx_addr, idx_strides = (0, ()) if indices is None else (indices.addr, indices.strides)
    _module('selection').order_stat(op, values.addr, values.dtype, values.strides, idx_addr, idx_strides, src.addr,
                                    src.dtype, src.strides, src.shape, dims, k)


def _order_stat_cost(device, op, values, indices, src, dim_mask, k):
    # A sort (mode, median) or a quickselect (kthvalue) per output slot: n log2(n) or ~2n
    # compare-and-move steps on the vector engine; HBM reads the input once.
    n = max(1, src.numel // max(values.numel, 1))
    steps = values.numel * (2 * n if op == "kthvalue" else n * max(1, (n - 1).bit_length()))
    moved = src.nbytes + values.nbytes + (indices.nbytes if indices is not None else 0)
    return _roofline(device, device.vector_engine.elementwise(steps, 2.0), moved, steps)


def _cum_select(op: str, out: Operand, indices: Operand | None, src: Operand, dim: int):
    idx_addr, idx_strides = (0, ()) if indices is None else (indices.addr, indices.strides)
    _module('selection').cum_select(op, out.addr, out.strides, idx_addr, idx_strides, src.addr, src.dtype,
                                    src.strides, src.shape, dim)


def _cum_select_cost(device, op, out, indices, src, dim):
    # One compare-and-select (cummax/cummin) or a log1p(exp()) (logcumsumexp) per element.
    cycles = 18.0 if op == "logcumsumexp" else 2.0
    moved = src.nbytes + out.nbytes + (indices.nbytes if indices is not None else 0)
    return _roofline(device, device.vector_engine.elementwise(src.numel, cycles), moved, int(src.numel * cycles))


def _search(out: Operand, values: Operand, seq: Operand, sorter: Operand | None, seq_len: int, common_dtype: int,
            right: bool):
    """``seq`` / ``sorter`` are described at the values' shape with stride 0 on the last dim; the
    stride along a row is the ``seq_stride`` kept in their last shape entry's place: the host
    passes them as (values.shape[:-1] + (seq_len,)) views, and this wrapper splits them."""
    nd = len(values.shape)
    row = (lambda o: tuple(o.strides[:-1]) + (0,)) if nd else (lambda o: ())
    s_strides, s_step = row(seq), seq.strides[-1] if seq.strides else 1
    if sorter is None:
        so_addr, so_strides, so_step = 0, (), 0
    else:
        so_addr, so_strides, so_step = sorter.addr, row(sorter), sorter.strides[-1] if sorter.strides else 1
    _module('binning').search(out.addr, out.dtype, out.strides, values.addr, values.dtype, values.strides,
                              seq.addr, seq.dtype, s_strides, s_step, seq_len, so_addr, so_strides, so_step,
                              values.shape, common_dtype, right)


def _search_cost(device, out, values, seq, sorter, seq_len, common_dtype, right):
    # A binary search per value: log2(len) dependent loads and compares (sorter loads double them).
    steps = values.numel * max(1, int(seq_len).bit_length()) * (2 if sorter is not None else 1)
    touched = min(seq.nbytes, values.numel * max(1, int(seq_len).bit_length()) * dtypes.ITEMSIZE[seq.dtype])
    moved = values.nbytes + out.nbytes + touched
    return _roofline(device, device.vector_engine.elementwise(steps, 2.0), moved, steps)


def _histogram(hist: Operand, inp: Operand, weight: Operand | None, algorithm: int, density: bool, *edges):
    """``inp`` is (N, D); ``hist`` D-dimensional; one 1-D ``edges`` operand per dim."""
    w_addr, w_strides = (0, (0,)) if weight is None else (weight.addr, weight.strides)
    _module('binning').histogram(hist.addr, hist.strides, inp.addr, inp.dtype, inp.strides, inp.shape[0], w_addr,
                                 w_strides, algorithm, density, [(e.addr, e.strides[0], e.shape[0]) for e in edges])


def _histogram_cost(device, hist, inp, weight, algorithm, density, *edges):
    # Per element: a bin position (a divide, or a binary search over the edges) and one
    # scatter-add; the histogram is written once (and read twice more for density).
    per = 8.0 if algorithm != 2 else 2.0 * max(1, max(e.numel for e in edges).bit_length())
    moved = inp.nbytes + (weight.nbytes if weight is not None else 0) + hist.nbytes * (3 if density else 1) \
        + sum(e.nbytes for e in edges)
    return _roofline(device, device.vector_engine.elementwise(inp.numel, per), moved, int(inp.numel * per))


def _segment_reduce(out: Operand, data: Operand, lengths: Operand, offsets: bool, op: str, has_initial: bool,
                    initial: float):
    """``data`` (outer, size_axis, inner), ``out`` (outer, nseg, inner), ``lengths`` (outer, nseg)
    or offsets (outer, nseg + 1): all contiguous."""
    outer, size_axis, inner = data.shape
    _module('segment').segment_reduce(out.addr, data.addr, data.dtype, lengths.addr, lengths.dtype, outer,
                                      size_axis, inner, out.shape[1], offsets, op, has_initial, initial)


def _segment_reduce_backward(grad_input: Operand, grad: Operand, output: Operand, data: Operand, lengths: Operand,
                             offsets: bool, op: str, has_initial: bool, initial: float):
    outer, size_axis, inner = data.shape
    _module('segment').segment_reduce_backward(grad_input.addr, grad.addr, output.addr, data.addr, data.dtype,
                                               lengths.addr, lengths.dtype, outer, size_axis, inner, grad.shape[1],
                                               offsets, op, has_initial, initial)


def _segment_cost(device, out, data, *rest):
    # One step per data element (prod's backward at zeros costs more; ignored), each operand once.
    moved = sum(o.nbytes for o in (out, data) + rest if isinstance(o, Operand))
    n = max(out.numel, data.numel)
    return _roofline(device, device.vector_engine.elementwise(n, 2.0), moved, n)




# -- wrappers: random sampling and dropout (random.pyx)
def _exponential(out: Operand, seed: int, offset: int, lambd: float):
    _module('random').exponential(out.addr, out.dtype, out.strides, out.shape, seed, offset, lambd)


def _cauchy(out: Operand, seed: int, offset: int, median: float, sigma: float):
    _module('random').cauchy(out.addr, out.dtype, out.strides, out.shape, seed, offset, median, sigma)


def _log_normal(out: Operand, seed: int, offset: int, mean: float, std: float):
    _module('random').log_normal(out.addr, out.dtype, out.strides, out.shape, seed, offset, mean, std)


def _geometric(out: Operand, seed: int, offset: int, p: float):
    _module('random').geometric(out.addr, out.dtype, out.strides, out.shape, seed, offset, p)


def _multinomial(out: Operand, probs: Operand, seed: int, offset: int):
    """``out`` (rows, samples) int64, ``probs`` (rows, categories); a 1-D op is described as one row."""
    rows, categories = probs.shape
    _module('random').multinomial(out.addr, out.strides, probs.addr, probs.dtype, probs.strides, rows, categories,
                                  out.shape[1], seed, offset)


def _multinomial_cost(device, out, probs, seed, offset):
    # A cumulative sum over each row, then per sample a Philox draw and a binary search of
    # log2(categories) compare steps; the rows are read twice (validation, sums).
    rows, categories = probs.shape
    steps = 2 * probs.numel + out.numel * (8 + max(1, categories.bit_length()))
    moved = 2 * probs.nbytes + out.nbytes
    return _roofline(device, device.vector_engine.elementwise(steps, 1.0), moved, steps)


def _logspace(out: Operand, steps: int, start: float, end: float, step: float, base: float, single: bool):
    _module('random').logspace(out.addr, out.dtype, out.strides[0], steps, start, end, step, base, single)




# -- wrappers: indexing extras (hashing.pyx, sorting.pyx, masking.pyx, indexing.pyx)
def _hash_xor(out: Operand, src: Operand):
    """``out`` is described over src's shape, with stride 0 on the reduced dims."""
    _module('hashing').hash_xor(out.addr, out.strides, src.addr, src.dtype, src.strides, src.shape)


def _hash_xor_cost(device, out, src):
    # One xor per input element (after a widening convert); the input streams once, each
    # output (the extents where out's stride is not 0) is written twice (cleared, then final).
    outputs = prod(n for n, st in zip(out.shape, out.strides) if st != 0)
    moved = src.nbytes + 2 * outputs * 8
    return _roofline(device, device.vector_engine.elementwise(src.numel + outputs, 2.0), moved, src.numel)


def _isin(out: Operand, elements: Operand, test: Operand, compute_dtype: int, invert: bool):
    _module('sorting').isin(out.addr, out.strides, elements.addr, elements.dtype, elements.strides, elements.shape,
                            test.addr, test.dtype, test.strides, test.shape, compute_dtype, invert)


def _isin_cost(device, out, elements, test, compute_dtype, invert):
    # Sort the test elements once (m log2 m steps), then a binary search per element.
    m = max(test.numel, 1)
    steps = m * max(1, (m - 1).bit_length()) + elements.numel * max(1, m.bit_length())
    moved = elements.nbytes + test.nbytes + out.nbytes
    return _roofline(device, device.vector_engine.elementwise(steps, 2.0), moved, steps)


def _nonzero_static(out: Operand, src: Operand, size: int, fill_value: int):
    _module('masking').nonzero_static(out.addr, out.strides, size, fill_value, src.addr, src.dtype, src.strides,
                                      src.shape)


def _repeat_interleave(out: Operand, repeats: Operand):
    _module('indexing').repeat_interleave(out.addr, out.strides[0], out.shape[0], repeats.addr, repeats.dtype,
                                          repeats.strides[0], repeats.shape[0])


def _unique(values: Operand, inverse: Operand, counts: Operand, count: Operand, src: Operand, sort: bool,
            want_inverse: bool, want_counts: bool):
    _module('sorting').unique(values.addr, inverse.addr, counts.addr, count.addr, src.addr, src.dtype, src.strides,
                              src.shape, sort, want_inverse, want_counts)


def _unique_dim(firsts: Operand, inverse: Operand, counts: Operand, count: Operand, src: Operand, sort: bool):
    """``src`` is described with the unique dim first."""
    _module('sorting').unique_dim(firsts.addr, inverse.addr, counts.addr, count.addr, src.addr, src.dtype,
                                  src.strides, src.shape, sort)


def _unique_dim_cost(device, firsts, inverse, counts, count, src, sort):
    # A stable merge sort of the n slices, each comparison up to a slice (m elements); then one
    # pass of slice comparisons. Reads src once into scratch.
    n = max(src.shape[0], 1)
    m = max(src.numel // n, 1)
    steps = ((n * max(1, (n - 1).bit_length())) if sort else 0) * m + n * m
    moved = src.nbytes + firsts.nbytes + inverse.nbytes + counts.nbytes
    return _roofline(device, device.vector_engine.elementwise(steps, 1.0), moved, steps)


def _unique_cost(device, values, inverse, counts, count, src, sort, want_inverse, want_counts):
    # A stable merge sort of the elements (n log2 n compare-and-move steps; none for the
    # consecutive form), then one pass writing values, inverse and counts.
    n = max(src.numel, 1)
    steps = (n * max(1, (n - 1).bit_length()) if sort else 0) + n
    moved = 2 * src.nbytes + (n * 8 if want_inverse else 0) + (n * 8 if want_counts else 0) + \
        n * dtypes.ITEMSIZE[src.dtype]
    return _roofline(device, device.vector_engine.elementwise(steps, 2.0), moved, steps)




# -- wrappers: pooling and sampling extras (pooling.pyx, resample.pyx, distance.pyx, embedding.pyx)
# Operands are 5-d (N, C, D, H, W) views (the host pads 1-d/2-d ones); window ints are scalars.

def _max_pool(out: Operand, indices: Operand, x: Operand, *window):
    _module('pooling').max_pool(*_pool_args(out), indices.addr, indices.strides, *_pool_args(x), window)


def _adaptive_max_pool(out: Operand, indices: Operand, x: Operand):
    _module('pooling').adaptive_max_pool(*_pool_args(out), indices.addr, indices.strides, *_pool_args(x))


def _pool_index_backward(grad_input: Operand, grad_output: Operand, indices: Operand):
    _module('pooling').pool_index_backward(*_pool_args(grad_input), *_pool_args(grad_output), indices.addr,
                                           indices.strides)


def _max_unpool(out: Operand, x: Operand, indices: Operand):
    _module('pooling').max_unpool(*_pool_args(out), *_pool_args(x), indices.addr, indices.strides)


def _avg_pool(out: Operand, x: Operand, *args):
    """``args`` = kernel, stride, padding (3 ints each), count_include_pad, divisor (0 = none)."""
    _module('pooling').avg_pool(*_pool_args(out), *_pool_args(x), args[:9], args[9], args[10])


def _avg_pool_backward(grad_input: Operand, grad_output: Operand, *args):
    _module('pooling').avg_pool_backward(*_pool_args(grad_input), *_pool_args(grad_output), args[:9], args[9],
                                         args[10])


def _adaptive_avg_pool(out: Operand, x: Operand):
    _module('pooling').adaptive_avg_pool(*_pool_args(out), *_pool_args(x))


def _adaptive_avg_pool_backward(grad_input: Operand, grad_output: Operand):
    _module('pooling').adaptive_avg_pool_backward(*_pool_args(grad_input), *_pool_args(grad_output))


def _upsample_nearest(out: Operand, x: Operand, exact: bool, sd: float, sh: float, sw: float):
    """(N, C, D, H, W) views; 1-d and 2-d operands padded with unit dims (resample.pyx)."""
    _module('resample').upsample_nearest(*_pool_args(out), *_pool_args(x), exact, (sd, sh, sw))


def _upsample_nearest_backward(grad_input: Operand, grad_output: Operand, exact: bool, sd: float, sh: float,
                               sw: float):
    _module('resample').upsample_nearest_backward(*_pool_args(grad_input), *_pool_args(grad_output), exact,
                                                  (sd, sh, sw))


def _upsample_separable(out: Operand, x: Operand, ndim: int, mode: int, align_corners: bool, sd: float,
                        sh: float, sw: float):
    """mode: 0 linear, 1 cubic, 2 antialiased linear, 3 antialiased cubic (resample.pyx)."""
    _module('resample').upsample_separable(*_pool_args(out), *_pool_args(x), ndim, mode, align_corners, (sd, sh, sw))


def _upsample_separable_backward(grad_input: Operand, grad_output: Operand, ndim: int, mode: int,
                                 align_corners: bool, sd: float, sh: float, sw: float):
    _module('resample').upsample_separable_backward(*_pool_args(grad_input), *_pool_args(grad_output), ndim, mode,
                                                align_corners, (sd, sh, sw))


def _grid_sample(out: Operand, x: Operand, grid: Operand, ndim: int, mode: int, padding_mode: int,
                 align_corners: bool):
    _module('resample').grid_sample(*_pool_args(out), *_pool_args(x), grid.addr, grid.dtype, grid.strides, ndim, mode,
                                padding_mode, align_corners)


def _grid_sample_cost(device, out: Operand, x: Operand, grid: Operand, ndim: int, mode: int, *rest):
    # per output element: 2**ndim corner reads (16 for bicubic, 1 for nearest) and their weights
    reads = 16 if mode == 2 else (1 if mode == 1 else 2 ** ndim)
    moved = out.nbytes + grid.nbytes + min(x.nbytes, out.numel * reads * dtypes.ITEMSIZE[x.dtype])
    return _roofline(device, device.vector_engine.elementwise(out.numel * reads, 2.0), moved,
                     out.numel * reads * 2)


def _pairwise_distance(dist: Operand, a: Operand, b: Operand, p: float, condensed: bool):
    _module('distance').pairwise_distance(dist.addr, dist.dtype, dist.strides, *_pool_args(a)[:3], a.shape,
                                      *_pool_args(b)[:3], b.shape, p, condensed)


def _pairwise_distance_backward(grad_a: Operand, grad: Operand, dist: Operand, a: Operand, b: Operand, p: float,
                                condensed: bool):
    _module('distance').pairwise_distance_backward(grad_a.addr, grad_a.dtype, grad_a.strides, grad.addr, grad.strides,
                                               dist.addr, dist.strides, a.addr, a.dtype, a.strides, a.shape,
                                               b.addr, b.strides, b.shape, p, condensed)


def _pairwise_cost(device, dist: Operand, a: Operand, b: Operand, *rest):
    """Every distance reads its two rows: (pairs x M) differences, 3 vector ops each (sub, abs,
    accumulate), streamed once from HBM."""
    work = dist.numel * a.shape[-1] * 3
    return _roofline(device, device.vector_engine.elementwise(work, 1.0), dist.nbytes + a.nbytes + b.nbytes, work)


def _pairwise_backward_cost(device, grad_a: Operand, grad: Operand, dist: Operand, a: Operand, b: Operand, *rest):
    # per (pair, coordinate): the difference, its derivative (a power for general p) and the product
    condensed = bool(rest[1]) if len(rest) > 1 else False    # pdist: each pair feeds two rows
    work = grad.numel * a.shape[-1] * (2 if condensed else 1) * 5
    moved = grad_a.nbytes + grad.nbytes + dist.nbytes + a.nbytes + b.nbytes
    return _roofline(device, device.vector_engine.elementwise(work, 1.0), moved, work)


def _fractional_max_pool(out: Operand, indices: Operand, x: Operand, samples: Operand, ndim: int, pd: int, ph: int,
                         pw: int):
    _module('pooling').fractional_max_pool(*_pool_args(out), indices.addr, indices.strides, *_pool_args(x),
                                        samples.addr, samples.dtype, samples.strides, ndim, (pd, ph, pw))


def _multi_margin_loss(out: Operand, x: Operand, target: Operand, weight, p: int, margin: float, reduction: int):
    w = (0, dtypes.FLOAT32, 0) if weight is None else (weight.addr, weight.dtype, weight.strides[0])
    _module('losses').multi_margin_loss(out.addr, out.dtype, out.strides[0], x.addr, x.dtype, x.strides, x.shape,
                                        target.addr, target.strides[0], *w, p, margin, reduction)


def _multi_margin_loss_backward(grad_input: Operand, grad_output: Operand, x: Operand, target: Operand, weight,
                                p: int, margin: float, reduction: int):
    w = (0, dtypes.FLOAT32, 0) if weight is None else (weight.addr, weight.dtype, weight.strides[0])
    _module('losses').multi_margin_loss_backward(grad_input.addr, grad_input.strides, grad_output.addr,
                                                 grad_output.strides[0], x.addr, x.dtype, x.strides, x.shape,
                                                 target.addr, target.strides[0], *w, p, margin, reduction)


def _multilabel_margin_loss(out: Operand, is_target: Operand, x: Operand, target: Operand, reduction: int):
    _module('losses').multilabel_margin_loss(out.addr, out.strides[0], is_target.addr, is_target.strides, x.addr,
                                             x.dtype, x.strides, x.shape, target.addr, target.strides, reduction)


def _multilabel_margin_loss_backward(grad_input: Operand, grad_output: Operand, x: Operand, target: Operand,
                                     is_target: Operand, reduction: int):
    _module('losses').multilabel_margin_loss_backward(grad_input.addr, grad_input.strides, grad_output.addr,
                                                      grad_output.strides[0], x.addr, x.dtype, x.strides, x.shape,
                                                      target.addr, target.strides, is_target.addr, is_target.strides,
                                                      reduction)


def _margin_cost(pairs_per_row):
    """Margin losses: each (N, C) score row costs C (multi-margin) or C * C (multilabel: every
    target label against every other class) compare-and-accumulate passes; operands streamed once."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        x = max(operands, key=lambda o: o.numel)
        n, c = (x.shape + (1, 1))[:2] if len(x.shape) == 2 else (1, x.numel)
        work = n * c * (c if pairs_per_row else 1) * 3
        return _roofline(device, device.vector_engine.elementwise(work, 1.0), sum(o.nbytes for o in operands),
                         work)
    return cost


def _ctc_loss(nll: Operand, log_alpha: Operand, log_probs: Operand, targets: Operand, meta: Operand, stride: int,
              blank: int, max_target: int):
    """``meta``: int64 (3, N) per-sample target offsets, input lengths, target lengths."""
    _module('losses').ctc_loss(nll.addr, nll.strides[0], log_alpha.addr, log_alpha.strides, log_probs.addr,
                               log_probs.dtype, log_probs.strides, log_probs.shape, targets.addr, targets.dtype,
                               stride, meta.addr, meta.strides, blank, max_target)


def _ctc_loss_cost(device, nll: Operand, log_alpha: Operand, log_probs: Operand, targets: Operand, *rest):
    # the recursion: per (sample, frame, state) 3 loads, 3 exp, 1 log and the adds; a serial chain over frames
    work = log_alpha.numel * 10
    moved = nll.nbytes + log_alpha.nbytes + log_probs.nbytes + targets.nbytes + rest[0].nbytes
    return _roofline(device, device.vector_engine.elementwise(work, 1.0), moved, work)


def _embedding_bag(out: Operand, weight: Operand, indices: Operand, bounds: Operand, psw, mode: int,
                   padding_idx: int, offset2bag, bag_size: Operand, max_indices: Operand):
    p = (0, dtypes.FLOAT32, 0) if psw is None else (psw.addr, psw.dtype, psw.strides[0])
    o = (0, 0) if offset2bag is None else (offset2bag.addr, offset2bag.strides[0])
    _module('embedding').embedding_bag(out.addr, out.dtype, out.strides, out.shape, weight.addr, weight.strides,
                                  weight.shape, indices.addr, indices.strides[0], indices.numel, bounds.addr,
                                  bounds.strides[0], *p, mode, padding_idx, *o, bag_size.addr, bag_size.strides[0],
                                  max_indices.addr, max_indices.strides, mode != 0)


def _embedding_bag_cost(device, out: Operand, weight: Operand, indices: Operand, *rest):
    # a gather of one weight row per index (only the rows' sectors cross HBM; a weight that fits the
    # cache at most once) and one add per element
    rows = memory.rows_gathered(device, weight, indices.numel)
    if weight.nbytes <= device.config.cache.capacity_bytes:
        rows = min(rows, memory.footprint(weight, device.config.cache.sector_bytes))
    work = indices.numel * weight.shape[1]
    moved = out.nbytes + indices.nbytes + rows
    return _roofline(device, device.vector_engine.elementwise(work, 1.0), moved, work)


def _pool3_window(*args):
    """Window volume of a pooling launch (1-d and 2-d ones have unit leading extents): the product of
    its first three integer arguments."""
    ints = [a for a in args if type(a) is int]
    return max(1, ints[0] * ints[1] * ints[2]) if len(ints) >= 3 else 1


def _separable_taps(*args):
    """Source reads per output of a separable interpolation: 2 (linear) or 4 (cubic) per real dim;
    the antialiased filters read a support-sized window, costed here as that of the cubic."""
    ndim, mode = [a for a in args if type(a) is int][:2]
    return (2 if mode == 0 else 4) ** ndim




# -- wrappers: RNN cells (rnn.pyx)
def _rnn_operand(o: Operand | None):
    return None if o is None else (o.addr, o.dtype, o.strides)


def _lstm_cell(hy: Operand, cy: Operand, workspace: Operand, input_gates: Operand, hidden_gates: Operand,
               cx: Operand, input_bias: Operand | None, hidden_bias: Operand | None):
    """One fused LSTM cell step over (B, H): gates (B, 4H), biases (4H,) or None."""
    B, H = cx.shape
    _module('rnn').lstm_cell_forward(*(_rnn_operand(o) for o in (hy, cy, workspace, input_gates, hidden_gates, cx,
                                                                 input_bias, hidden_bias)), B, H)


def _lstm_cell_backward(grad_gates: Operand, grad_cx: Operand, grad_hy: Operand | None, grad_cy: Operand | None,
                        cx: Operand, cy: Operand, workspace: Operand):
    B, H = cx.shape
    _module('rnn').lstm_cell_backward(*(_rnn_operand(o) for o in (grad_gates, grad_cx, grad_hy, grad_cy, cx, cy,
                                                                  workspace)), B, H)


def _gru_cell(hy: Operand, workspace: Operand, input_gates: Operand, hidden_gates: Operand, hx: Operand,
              input_bias: Operand | None, hidden_bias: Operand | None):
    """One fused GRU cell step over (B, H): gates (B, 3H), workspace (B, 5H), biases (3H,) or None."""
    B, H = hx.shape
    _module('rnn').gru_cell_forward(*(_rnn_operand(o) for o in (hy, workspace, input_gates, hidden_gates, hx,
                                                                input_bias, hidden_bias)), B, H)


def _gru_cell_backward(grad_input_gates: Operand, grad_hidden_gates: Operand, grad_hx: Operand, grad_hy: Operand,
                       workspace: Operand):
    B, H = grad_hy.shape
    _module('rnn').gru_cell_backward(*(_rnn_operand(o) for o in (grad_input_gates, grad_hidden_gates, grad_hx,
                                                                 grad_hy, workspace)), B, H)


def _rnn_cell_cost(cycles_per_state: float, flops_per_state: int):
    """One pass over the (B, H) states: each state element costs a few vector cycles (3-4
    exp/tanh and a dozen multiply-adds) and every operand streams through HBM once (a bias
    once, not per row)."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        states = min(o.numel for o in operands if len(o.shape) == 2)
        moved = sum(o.nbytes for o in operands)
        return _roofline(device, device.vector_engine.elementwise(states, cycles_per_state), moved,
                         states * flops_per_state)
    return cost




# -- wrappers: GradScaler and fused optimizer steps (foreach.pyx)
def _addr_of(o: Operand | None):
    return None if o is None else o.addr


def _dtype_of(o: Operand | None):
    return None if o is None else o.dtype


def _check_dense(kernel: str, *operands) -> int:
    """The fused optimizer kernels take dense, contiguous operands of one element count."""
    n = None
    for o in operands:
        if o is None:
            continue
        expected, stride = [], 1
        for extent in reversed(o.shape):
            expected.append(stride)
            stride *= extent
        if o.numel > 1 and tuple(s for s, e in zip(o.strides, o.shape) if e != 1) != \
                tuple(s for s, e in zip(reversed(expected), o.shape) if e != 1):
            raise KernelArgumentError(f"{kernel}: operands must be contiguous, got strides {o.strides}")
        if n is not None and o.numel != n:
            raise KernelArgumentError(f"{kernel}: operands have {n} and {o.numel} elements")
        n = o.numel
    return n


def _amp_unscale(grad: Operand, found_inf: Operand, inv_scale: Operand):
    _module('foreach').amp_unscale(grad.addr, grad.dtype, grad.strides, grad.shape, found_inf.addr, inv_scale.addr)


def _amp_update_scale(scale: Operand, growth_tracker: Operand, found_inf: Operand, growth_factor: float,
                      backoff_factor: float, growth_interval: int):
    _module('foreach').amp_update_scale(scale.addr, growth_tracker.addr, found_inf.addr, growth_factor,
                                        backoff_factor, growth_interval)


def _fused_adam(param: Operand, grad: Operand, exp_avg: Operand, exp_avg_sq: Operand, max_exp_avg_sq,
                step: Operand, lr_tensor, lr: float, beta1: float, beta2: float, weight_decay: float, eps: float,
                adamw: bool, maximize: bool, grad_scale, found_inf):
    n = _check_dense("fused_adam", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)
    _module('foreach').fused_adam(param.addr, param.dtype, grad.addr, grad.dtype, exp_avg.addr, exp_avg.dtype,
                                  exp_avg_sq.addr, exp_avg_sq.dtype, _addr_of(max_exp_avg_sq),
                                  _dtype_of(max_exp_avg_sq), n, step.addr, step.dtype, _addr_of(lr_tensor),
                                  _dtype_of(lr_tensor), lr, beta1, beta2, weight_decay, eps, adamw, maximize,
                                  _addr_of(grad_scale), _addr_of(found_inf))


def _fused_sgd(param: Operand, grad: Operand, momentum_buffer, lr_tensor, lr: float, weight_decay: float,
               momentum: float, dampening: float, nesterov: bool, maximize: bool, first_step: bool,
               grad_scale, found_inf):
    n = _check_dense("fused_sgd", param, grad, momentum_buffer)
    _module('foreach').fused_sgd(param.addr, param.dtype, grad.addr, grad.dtype, _addr_of(momentum_buffer),
                                 _dtype_of(momentum_buffer), n, _addr_of(lr_tensor), _dtype_of(lr_tensor), lr,
                                 weight_decay, momentum, dampening, nesterov, maximize, first_step,
                                 _addr_of(grad_scale), _addr_of(found_inf))


def _scalar_kernel_cost(device, *args):
    # A handful of scalar loads and stores: the engine's minimum dispatch plus the bytes.
    operands = [a for a in args if isinstance(a, Operand)]
    return _roofline(device, device.vector_engine.elementwise(1, 4.0), sum(o.nbytes for o in operands), 4)


# -- fused kernels (fused.pyx): compiled graphs' elementwise chains and matmul epilogues, and the
# emu:: custom operators (torch_plugin/compile, torch_plugin/custom_ops.py). A pointwise program is
# a launch string of postfix tokens: "L<i>" loads input i, "C<float>" pushes a constant, a name
# (FUSED_OPS) applies that op; e.g. "L0 L1 add C0.5 mul gelu".
FUSED_OPS = {"neg": 2, "abs": 3, "exp": 4, "log": 5, "sqrt": 6, "rsqrt": 7, "tanh": 8, "sigmoid": 9,
             "relu": 10, "erf": 11, "reciprocal": 12, "sin": 13, "cos": 14, "log1p": 15, "expm1": 16,
             "silu": 17, "gelu": 18, "gelu_tanh": 19, "not": 20, "round_f32": 21, "round_f16": 22,
             "round_bf16": 23, "to_bool": 24, "add": 40, "sub": 41, "mul": 42, "div": 43, "pow": 44,
             "max": 45, "min": 46, "gt": 47, "lt": 48, "ge": 49, "le": 50, "eq": 51, "ne": 52, "and": 53,
             "or": 54, "where": 60}
_FUSED_CYCLES = {"round_f32": 0.0, "round_f16": 0.5, "round_bf16": 0.5, "to_bool": 0.0, "not": 1.0,
                 "and": 1.0, "or": 1.0, "max": 1.0, "min": 1.0, "where": 1.0}


_FUSED_PROGRAMS: dict = {}  # program string -> its parse (a compiled graph launches the same ones)


def parse_fused_program(program: str) -> tuple:
    """(code, consts, vector cycles per element group, flops per element) of a program string."""
    parsed = _FUSED_PROGRAMS.get(program)
    if parsed is None:
        parsed = _FUSED_PROGRAMS[program] = _parse_fused_program(program)
    return parsed


def _parse_fused_program(program: str) -> tuple:
    code, consts, cycles, flops = [], [], 0.0, 0
    for token in program.split():
        head = token[0]
        if head == "L" and token[1:].isdigit():
            code += (0, int(token[1:]))
        elif head == "C":
            try:
                consts.append(float(token[1:]))
            except ValueError:
                raise KernelArgumentError(f"fused program: bad constant {token!r}") from None
            code += (1, len(consts) - 1)
        elif token in FUSED_OPS:
            code += (FUSED_OPS[token], 0)
            c = _FUSED_CYCLES.get(token, pointwise_cycles(token))
            cycles += c
            flops += max(1, int(c)) if c else 0
        else:
            raise KernelArgumentError(f"fused program: unknown token {token!r}")
    return tuple(code), tuple(consts), max(cycles, 1.0), flops


def _fused_pointwise(out: Operand, program: str, *inputs: Operand):
    code, consts, _, _ = parse_fused_program(program)
    _module('fused').pointwise_program((out.addr, out.dtype, out.strides),
                                       [(x.addr, x.dtype, x.strides) for x in inputs], out.shape, code, consts)


def _fused_pointwise_cost(device, out: Operand, program: str, *inputs: Operand):
    # ONE pass over HBM: every operand read once (broadcast ones at their real size), out written once.
    _, _, cycles, flops = parse_fused_program(program)
    traffic = memory.elementwise(device, out, inputs)
    return _roofline(device, device.vector_engine.elementwise(out.numel, cycles, out.dtype), traffic.hbm,
                     out.numel * flops, traffic.store, traffic.cache)


def _matmul_epilogue(out: Operand, a: Operand, b: Operand, c, beta: float, alpha: float, program: str,
                     view: Operand, *inputs: Operand):
    """out (M, N) = beta * c + alpha * a @ b, then the epilogue program over ``view`` (the same
    memory as ``out``, in the consumer's shape; it is the program's input 0) and ``inputs``."""
    _matmul(out, a, b, c, beta, alpha)
    _fused_pointwise(view, program, view, *inputs)


def _matmul_epilogue_cost(device, out, a, b, c, beta, alpha, program: str, view, *inputs):
    # The epilogue runs on the tiles as they drain from the matrix engine: no HBM pass for the
    # product; its extra operands are read once and its vector work is added (not hidden).
    M, K = a.shape
    N = b.shape[1]
    _, _, cycles, flops = parse_fused_program(program)
    traffic = memory.gemm(device, M, N, K, a, b, out, c)
    extra = sum(x.nbytes for x in inputs)
    cost = _roofline(device, device.matrix_engine.gemm(M, N, K, a.dtype), traffic.hbm + extra, 2 * M * N * K,
                     traffic.store, traffic.cache + extra)
    epilogue_ns = device.vector_engine.elementwise(view.numel, cycles, view.dtype).ns
    ns = cost.ns + epilogue_ns
    return cost._replace(ns=ns, flops=cost.flops + view.numel * flops, cycles=round(ns * device.config.clock_ghz))


def _bmm_epilogue(out: Operand, a: Operand, b: Operand, program: str, view: Operand, *inputs: Operand):
    """out (B, M, N) = a @ b per batch (the bmm kernel), then the epilogue program over ``view``
    (out's memory in the consumer's shape; the program's input 0) and ``inputs``."""
    _bmm(out, a, b, None, 0.0, 1.0)
    _fused_pointwise(view, program, view, *inputs)


def _bmm_epilogue_cost(device, out, a, b, program: str, view, *inputs):
    # As matmul_epilogue: the product's tiles pass through the epilogue before they are stored.
    _, _, cycles, flops = parse_fused_program(program)
    batch, M, K = a.shape
    N = b.shape[2]
    traffic = memory.gemm(device, M, N, K, a, b, out, None, batch)
    extra = sum(x.nbytes for x in inputs)
    cost = _roofline(device, device.matrix_engine.gemm(M, N, K, a.dtype, batch, what="bmm"), traffic.hbm + extra,
                     2 * batch * M * N * K, traffic.store, traffic.cache + extra)
    ns = cost.ns + device.vector_engine.elementwise(view.numel, cycles, view.dtype).ns
    return cost._replace(ns=ns, flops=cost.flops + view.numel * flops, cycles=round(ns * device.config.clock_ghz))


# Row reductions with their elementwise producers (prologue) and consumer (epilogue) in one
# kernel: the prologue program is evaluated into ``out`` (its rounding per op, as eager's chain
# stores it), the reduction runs on those rows in place (norm.pyx's own row code, so the values
# are eager's), then the epilogue program runs over ``out`` in place (its input 0). On the chip
# the rows stay in the scratchpad between the three: HBM sees the prologue's inputs read once,
# the epilogue's extra inputs read once, and ``out`` written once.
def _fused_softmax(out: Operand, dim: int, safe: bool, prologue: str, n_prologue: int, epilogue: str,
                   *inputs: Operand):
    _fused_pointwise(out, prologue, *inputs[:n_prologue])
    _softmax(out, out, dim, safe)
    if epilogue:
        _fused_pointwise(out, epilogue, out, *inputs[n_prologue:])


def _fused_layer_norm(y: Operand, mean: Operand, rstd: Operand, w, b, n_outer: int, eps: float, prologue: str,
                      n_prologue: int, epilogue: str, *inputs: Operand):
    _fused_pointwise(y, prologue, *inputs[:n_prologue])
    _norm_forward(y, y, w, b, mean, rstd, None, None, None, None, n_outer, eps, 0.0, True, False)
    if epilogue:
        _fused_pointwise(y, epilogue, y, *inputs[n_prologue:])


def _fused_row_cost(reduction_cycles: float, reduction_flops: int, program_at: tuple):
    """One pass: every input read once, the outputs written once; the vector work of the
    reduction plus both programs (``program_at``: the argument positions of the two programs)."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        out = operands[0]
        cycles, flops = reduction_cycles, reduction_flops
        for at in program_at:
            if args[at]:
                _, _, c, f = parse_fused_program(args[at])
                cycles, flops = cycles + c, flops + f
        traffic = memory.elementwise(device, out, operands[1:])
        return _roofline(device, device.vector_engine.elementwise(out.numel, cycles, out.dtype), traffic.hbm,
                         out.numel * flops, traffic.store, traffic.cache)
    return cost


def _scratch(dtype: int, shape: tuple):
    """A contiguous row block in on-chip scratch (host memory here, never HBM): (buffer, operand)."""
    n = prod(shape)
    buffer = array.array("d", bytes(8 * max(1, -(-n * dtypes.ITEMSIZE[dtype] // 8))))
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return buffer, Operand(buffer.buffer_info()[0], dtype, tuple(shape), tuple(reversed(strides)))


def _fused_rms_norm(out: Operand, square_dtype: int, stat_dtype: int, square: str, epilogue: str,
                    *inputs: Operand):
    """RMS norm as the graph writes it, in one kernel: ``stat = mean(square(inputs))`` over out's
    last dimension (keepdim), then ``out = epilogue(stat, inputs)`` (the statistic is the
    epilogue's input 0, broadcast along the row; the inputs follow). The square program's result
    lands in contiguous scratch rows, rounded per op as eager's chain stores it; the mean is the
    reduction kernel eager's ``mean`` runs, on the same shape and strides (so the same summation
    order), into a scratch statistic of eager's dtype. HBM sees the inputs read once and out
    written once."""
    keep, sq = _scratch(square_dtype, out.shape)
    _fused_pointwise(sq, square, *inputs)
    stat_shape = out.shape[:-1] + (1,)
    keep_stat, stat = _scratch(stat_dtype, stat_shape)
    _reduce("mean", stat, None, sq, 1 << (len(out.shape) - 1), stat_dtype, 0.0)
    row = Operand(stat.addr, stat_dtype, out.shape, stat.strides[:-1] + (0,))
    _fused_pointwise(out, epilogue, row, *inputs)


def _fused_keep(keep: Operand, program: str, n_inputs: int, kind: str, *args):
    """A value the graph's other users read, computed in the row kernel that also reads it:
    ``keep = program(args[:n_inputs])`` (the fused_pointwise evaluation), then the row kernel
    ``kind`` (fused_softmax / fused_layer_norm / fused_rms_norm) on ``args[n_inputs:]``, whose
    inputs include keep. A transformer's residual sum is the case: ``h = x + attn`` feeds the
    norm and the next residual add, and both are one launch."""
    if kind not in _KEEP_KINDS:
        raise KernelArgumentError(f"fused_keep: {kind!r} is not a row kernel (one of {sorted(_KEEP_KINDS)})")
    _fused_pointwise(keep, program, *args[:n_inputs])
    KERNELS[kind].run(*args[n_inputs:])


def _fused_keep_cost(device, keep: Operand, program: str, n_inputs: int, kind: str, *args):
    # The two passes' costs added: the pre-pass reads its inputs once and writes keep once; the row
    # kernel's cost is its own, its read of keep counted as HBM traffic (conservative: rows that fit
    # the scratchpad would stay on chip). What fusing saves is the second launch.
    if kind not in _KEEP_KINDS:
        raise KernelArgumentError(f"fused_keep: {kind!r} is not a row kernel (one of {sorted(_KEEP_KINDS)})")
    pre = _fused_pointwise_cost(device, keep, program, *args[:n_inputs])
    row = KERNELS[kind].cost(device, *args[n_inputs:])
    ns = pre.ns + row.ns
    return row._replace(ns=ns, nbytes=pre.nbytes + row.nbytes, flops=pre.flops + row.flops,
                        cycles=round(ns * device.config.clock_ghz), cache_bytes=pre.cache_bytes + row.cache_bytes)


_KEEP_KINDS = frozenset(("fused_softmax", "fused_layer_norm", "fused_rms_norm"))


def _fused_add_rms_norm(out: Operand, new_residual: Operand, x: Operand, residual: Operand, weight: Operand,
                        eps: float):
    rows = prod(x.shape[:-1])
    _module('fused').add_rms_norm(out.addr, new_residual.addr, x.addr, residual.addr, x.dtype, weight.addr,
                                  weight.dtype, rows, x.shape[-1] if x.shape else 1, eps)


def _row_normalize(y: Operand, scale: Operand, x: Operand):
    _module('fused').row_normalize(y.addr, scale.addr, x.addr, x.dtype, x.shape[0], x.shape[1])


def _row_kernel_cost(cycles_per_element: float, flops_per_element: int):
    """A row kernel over contiguous rows: each operand streamed once, a few vector passes per row."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        n = max(o.numel for o in operands)
        moved = sum(o.nbytes for o in operands)
        return _roofline(device, device.vector_engine.elementwise(n, cycles_per_element, operands[-1].dtype),
                         moved, n * flops_per_element, operands[0].nbytes + operands[1].nbytes)
    return cost


# -- fused attention (attention.pyx): FlashAttention-2's tiled algorithm --------------------------
# Operands: q (B, Hq, Lq, D), k (B, Hk, Lk, D), v (B, Hk, Lk, Dv), out (B, Hq, Lq, Dv), the float32
# logsumexp (B, Hq, Lq), and an optional bias read (B, Hq, Lq, Lk) with broadcast strides.
ATTENTION_TILE_K = 64          # key/value rows per streamed tile
# Vector-engine cycles per score element, as the transcendental table counts them (exp = 8):
# forward: the scaled score (1), the running max (1), exp (8), the row sum (1), the convert of P
# for the P @ V product (1); backward: the score (1), exp (8), dS = P (dP - D) (2), the converts of
# P and dS (2). Dropout adds the generator's rounds (Philox4x32-10: ~10 integer ops per word).
_ATTENTION_FORWARD_CYCLES = 12.0
_ATTENTION_BACKWARD_CYCLES = 13.0
_ATTENTION_DROPOUT_CYCLES = 10.0


def _attention_dims(q: Operand, k: Operand, v: Operand):
    B, Hq, Lq, D = q.shape
    return B, Hq, k.shape[1], Lq, k.shape[2], D, v.shape[3]


def _attention_args(q, k, v, bias):
    b = None if bias is None else (bias.addr, bias.strides)
    return (q.addr, q.strides), (k.addr, k.strides), (v.addr, v.strides), b, (0 if bias is None else bias.dtype)


def _attention(out: Operand, lse: Operand, q: Operand, k: Operand, v: Operand, bias: Operand | None, scale: float,
               causal: bool, dropout_p: float, seed: int, offset: int):
    qa, ka, va, ba, bdt = _attention_args(q, k, v, bias)
    _module('attention').forward(q.dtype, _attention_dims(q, k, v), scale, causal, dropout_p, seed, offset, qa, ka,
                                 va, (out.addr, out.strides), (lse.addr, lse.strides), ba, bdt)


def _attention_backward(dq, dk, dv, dbias, grad_out: Operand, q: Operand, k: Operand, v: Operand, out: Operand,
                        lse: Operand, bias: Operand | None, scale: float, causal: bool, dropout_p: float, seed: int,
                        offset: int):
    qa, ka, va, ba, bdt = _attention_args(q, k, v, bias)
    ref = (lambda o: None if o is None else (o.addr, o.strides))
    _module('attention').backward(q.dtype, _attention_dims(q, k, v), scale, causal, dropout_p, seed, offset, qa, ka,
                                  va, (out.addr, out.strides), (lse.addr, lse.strides),
                                  (grad_out.addr, grad_out.strides), ref(dq), ref(dk), ref(dv), ba, bdt, ref(dbias))


def attention_tile_q(device, Lq: int, D: int, Dv: int, itemsize: int) -> int:
    """Query rows a core keeps resident per tile: the largest of the matrix array's rows x 1, 2, 4
    (FlashAttention-2 uses 128 on an H100) whose working set fits the core's scratchpad: the Q tile,
    the float32 output accumulator and score tile, and double-buffered K and V tiles. Never more
    rows than the sequence has (rounded up to the array); halved below the array where nothing fits."""
    pad = device.config.scratchpad.bytes_per_core
    tk = ATTENTION_TILE_K

    def fits(tq):
        return tq * D * itemsize + tq * Dv * 4 + tq * tk * 4 + 2 * tk * (D + Dv) * itemsize <= pad

    rows = device.matrix_engine.config.rows
    tq = rows
    while tq > 16 and not fits(tq):
        tq //= 2
    while tq * 2 <= 4 * rows and tq < Lq and fits(tq * 2):
        tq *= 2
    return tq


def _attention_chains(Lq: int, Lk: int, tq: int, causal: bool):
    """(rows, key columns) of each query tile of one head: causal tiles stop at the diagonal
    (top-left aligned: row i sees keys j <= i), so the tiles above it are never computed."""
    chains = []
    for i0 in range(0, Lq, tq):
        rows = min(tq, Lq - i0)
        chains.append((rows, min(Lk, i0 + rows) if causal else Lk))
    return chains


def _busiest_core(lengths: list, copies: int, cores: int) -> tuple:
    """(time of the busiest core, units it ran, cores used) when ``copies`` x ``lengths`` independent
    units (query-tile chains of every head) are spread over ``cores``: equal units run in waves;
    unequal ones (causal) go longest first to the least loaded core, as FlashAttention-2 orders them."""
    n = len(lengths) * copies
    used = min(cores, n)
    if len(set(lengths)) == 1:
        waves = -(-n // used)
        return waves * lengths[0], waves, used
    if n > 20000:   # many small units: as balanced as the average, never shorter than the longest
        total = sum(lengths) * copies
        return max(total / used, max(lengths)), -(-n // used), used
    import heapq
    loads = [(0.0, 0)] * used
    for length in sorted(lengths * copies, reverse=True):
        t, units = heapq.heappop(loads)
        heapq.heappush(loads, (t + length, units + 1))
    t, units = max(loads)
    return t, units, used


def _attention_work(device, dims, dtype: int, causal: bool, dropout: bool, backward: bool):
    """The engine work of the kernel on its cores, and the (query rows, key columns) pairs it computes."""
    B, Hq, Hk, Lq, Lk, D, Dv = dims
    me, ve = device.matrix_engine, device.vector_engine
    cores = me.cores
    isz = dtypes.ITEMSIZE[dtype]
    tq, tk = attention_tile_q(device, Lq, D, Dv, isz), ATTENTION_TILE_K
    cycles = (_ATTENTION_BACKWARD_CYCLES if backward else _ATTENTION_FORWARD_CYCLES) + \
        (_ATTENTION_DROPOUT_CYCLES if dropout else 0.0)
    pair_cache = {}

    def pair_ns(rows, cols):
        """One (query tile, key tile) step on one core. FlashAttention-2 does not specialise warps:
        the softmax of a score tile waits for its Q K^T product and the P @ V product waits for the
        softmax, so a core's matrix and vector work add up (FlashAttention-3's overlap is left out)."""
        key = (rows, cols)
        if key not in pair_cache:
            one = lambda M, N, K: me.gemm(M, N, K, dtype, batch=cores).ns     # one tile product, one core
            if backward:   # S = Q K^T, dP = dO V^T, dV += P^T dO, dQ += dS K, dK += dS^T Q
                matrix = one(rows, cols, D) + one(rows, cols, Dv) + one(cols, Dv, rows) + one(rows, D, cols) + \
                    one(cols, D, rows)
                vector_elements, rescale = rows * cols, 0
            else:          # S = Q K^T, O += P V
                matrix = one(rows, cols, D) + one(rows, Dv, cols)
                vector_elements, rescale = rows * cols, rows * Dv   # and the accumulator's rescale
            vector = ve.elementwise(vector_elements * cores, cycles, dtypes.FLOAT32)
            vector_ns = vector.ns - vector.fill_ns
            if rescale:
                extra = ve.elementwise(rescale * cores, 1.0, dtypes.FLOAT32)
                vector_ns += extra.ns - extra.fill_ns
            pair_cache[key] = matrix + vector_ns
        return pair_cache[key]

    chains = _attention_chains(Lq, Lk, tq, causal)
    lengths, pairs = [], []
    for rows, cols in chains:
        steps = [(rows, min(tk, cols - j0)) for j0 in range(0, cols, tk)]
        lengths.append(sum(pair_ns(r, c) for r, c in steps))
        pairs.append(steps)
    busy, units, used = _busiest_core(lengths, B * Hq, cores)
    fill = ve.config.pipeline_cycles / device.config.clock_ghz
    ns = busy + fill
    steps_per_core = max(1, round(units * sum(len(s) for s in pairs) / len(pairs)))
    from emulator.tiles import coarsen
    tiles = coarsen(steps_per_core)
    tiling = (f"{'attention_backward' if backward else 'attention'} {used} cores, {tq}x{tk} tiles "
              f"(query x key), {B * Hq * len(chains)} query tiles{', causal' if causal else ''}")
    work = Work(ns, round(ns * device.config.clock_ghz), used, tiling, me.lane_names[:used] + ve.lane_names[:used],
                tiles, busy / tiles, fill, "matrix", fill)
    return work, tq, pairs


def _attention_useful_pairs(Lq: int, Lk: int, causal: bool) -> int:
    """Score elements that take part (the FLOP count of the FlashAttention papers: causal is half)."""
    if not causal:
        return Lq * Lk
    full = min(Lq, Lk)                      # rows 0 .. Lk - 1 see i + 1 keys, later rows all Lk
    return full * (full + 1) // 2 + max(0, Lq - Lk) * Lk


def _attention_cost(device, out, lse, q, k, v, bias, scale, causal, dropout_p, seed, offset):
    dims = _attention_dims(q, k, v)
    B, Hq, Hk, Lq, Lk, D, Dv = dims
    work, tq, pairs = _attention_work(device, dims, q.dtype, causal, dropout_p > 0, False)
    isz = dtypes.ITEMSIZE[q.dtype]
    # Q read and O written once, the logsumexp written; per query tile its K/V rows stream from
    # HBM once (no score matrix leaves the chip); a bias tile is read per score tile.
    streamed = sum(cols for rows, cols in _attention_chains(Lq, Lk, tq, causal))
    moved = q.nbytes + out.nbytes + lse.nbytes + B * Hq * streamed * (D + Dv) * isz
    if bias is not None:
        moved += B * Hq * sum(r * c for steps in pairs for r, c in steps) * dtypes.ITEMSIZE[bias.dtype]
    flops = 2 * B * Hq * _attention_useful_pairs(Lq, Lk, causal) * (D + Dv)
    return _roofline(device, work, moved, flops, out.nbytes + lse.nbytes)


def _attention_backward_cost(device, dq, dk, dv, dbias, grad_out, q, k, v, out, lse, bias, scale, causal,
                             dropout_p, seed, offset):
    dims = _attention_dims(q, k, v)
    B, Hq, Hk, Lq, Lk, D, Dv = dims
    work, tq, pairs = _attention_work(device, dims, q.dtype, causal, dropout_p > 0, True)
    isz = dtypes.ITEMSIZE[q.dtype]
    # FlashAttention-2's backward keeps a K/V tile resident and streams the query tiles past it:
    # per score tile its Q and dO rows are read and its float32 dQ rows read and written back; O,
    # dO and the logsumexp are read once for D = rowsum(dO * O); K, V read and dK, dV written once.
    tile_rows = B * Hq * sum(r for steps in pairs for r, c in steps)   # query rows over all score tiles
    moved = q.nbytes + k.nbytes + v.nbytes + out.nbytes + grad_out.nbytes + 2 * lse.nbytes
    moved += tile_rows * ((D + Dv) * isz + 8 * D)
    stores = sum(o.nbytes for o in (dq, dk, dv, dbias) if o is not None)
    if bias is not None:
        moved += B * Hq * sum(r * c for steps in pairs for r, c in steps) * dtypes.ITEMSIZE[bias.dtype]
    moved += stores
    flops = 2 * B * Hq * _attention_useful_pairs(Lq, Lk, causal) * (3 * D + 2 * Dv)
    return _roofline(device, work, moved, flops, stores)



# -- quantized and low-precision GEMMs (quantized.pyx; torch_plugin/ops/quantized.py) --------------
# Each is a matrix-engine GEMM. _int_mm runs at the int8 MAC rate, _scaled_mm at the float8 rate
# (macs_per_cycle.float8); the weight-only kernels widen their int8/int4 weight to the activation
# type, so they run at that type's rate and gain only in the weight's traffic. Scales, zeros and
# bias are applied as the tiles drain (a vector-engine epilogue over the output).

def _as_kn(w: Operand, K: int, N: int) -> Operand:
    """An N x K weight described as the K x N operand of the GEMM cost model."""
    return Operand(w.addr, w.dtype, (K, N), (w.strides[1], w.strides[0]))


def _quantized_gemm_cost(device, M, N, K, a, b, out, rate_dtype, extra_bytes=0, epilogue_cycles=0.0):
    traffic = memory.gemm(device, M, N, K, a, b, out)
    cost = _roofline(device, device.matrix_engine.gemm(M, N, K, rate_dtype), traffic.hbm + extra_bytes,
                     2 * M * N * K, traffic.store, traffic.cache + extra_bytes)
    if not epilogue_cycles or not out.numel:
        return cost
    ns = cost.ns + device.vector_engine.elementwise(out.numel, epilogue_cycles, dtypes.FLOAT32).ns
    return cost._replace(ns=ns, flops=cost.flops + out.numel, cycles=round(ns * device.config.clock_ghz))


def _int_mm(out: Operand, a: Operand, b: Operand):
    _module('quantized').int_mm(out.addr, out.strides, a.addr, a.dtype, a.strides, b.addr, b.strides,
                                a.shape[0], b.shape[1], a.shape[1])


def _int_mm_cost(device, out, a, b):
    return _quantized_gemm_cost(device, a.shape[0], b.shape[1], a.shape[1], a, b, out, dtypes.INT8)


def _weight_int8pack_mm(out: Operand, a: Operand, b: Operand, scales: Operand):
    _module('quantized').weight_int8pack_mm(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides,
                                            b.addr, b.strides, scales.addr, scales.dtype, scales.strides[0],
                                            a.shape[0], b.shape[0], a.shape[1])


def _weight_int8pack_mm_cost(device, out, a, b, scales):
    M, K, N = a.shape[0], a.shape[1], b.shape[0]
    return _quantized_gemm_cost(device, M, N, K, a, _as_kn(b, K, N), out, a.dtype, scales.nbytes, 1.0)


def _int4_pack(out: Operand, w: Operand, block: int, split: int):
    _module('quantized').int4_pack(out.addr, w.addr, w.strides, w.shape[0], w.shape[1], block, split)


def _int4pack_mm(out: Operand, a: Operand, w: Operand, group_size: int, sz: Operand, block: int, split: int):
    _module('quantized').int4pack_mm(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides, w.addr,
                                     w.shape[0], 2 * w.shape[1], group_size, sz.addr, sz.dtype, sz.strides,
                                     a.shape[0], block, split)


def _int4pack_mm_cost(device, out, a, w, group_size, sz, block, split):
    M, K, N = a.shape[0], a.shape[1], w.shape[0]
    packed = Operand(w.addr, dtypes.UINT8, (K // 2, N), (1, K // 2))   # two weights a byte
    # dequantization ((q - 8) * scale + zero per weight) on the vector engine, then the GEMM
    dequant = device.vector_engine.elementwise(N * K, 2.0, a.dtype).ns
    cost = _quantized_gemm_cost(device, M, N, K, a, packed, out, a.dtype, sz.nbytes)
    ns = cost.ns + dequant
    return cost._replace(ns=ns, cycles=round(ns * device.config.clock_ghz))


def _scaled_mm(out: Operand, a: Operand, b: Operand, sa: Operand, sb: Operand, bias, result_scale):
    _module('quantized').scaled_mm(out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides, b.addr,
                                   b.dtype, b.strides, sa.addr, sa.strides[0], sb.addr, sb.strides[0],
                                   bias.addr if bias is not None else 0,
                                   bias.dtype if bias is not None else dtypes.FLOAT32,
                                   bias.strides[0] if bias is not None else 0,
                                   result_scale.addr if result_scale is not None else 0,
                                   a.shape[0], b.shape[1], a.shape[1])


def _scaled_mm_cost(device, out, a, b, sa, sb, bias, result_scale):
    extra = sa.nbytes + sb.nbytes + (bias.nbytes if bias is not None else 0)
    steps = 2.0 + (bias is not None) + (result_scale is not None)
    return _quantized_gemm_cost(device, a.shape[0], b.shape[1], a.shape[1], a, b, out, a.dtype, extra, steps)


_QUANTIZED_KERNELS = (
    Kernel("int_mm", "matrix", _int_mm, _int_mm_cost),
    Kernel("weight_int8pack_mm", "matrix", _weight_int8pack_mm, _weight_int8pack_mm_cost),
    Kernel("int4_pack", "vector", _int4_pack, _vector_cost(1.0, 0)),
    Kernel("int4pack_mm", "matrix", _int4pack_mm, _int4pack_mm_cost),
    Kernel("scaled_mm", "matrix", _scaled_mm, _scaled_mm_cost),
)


KERNELS: dict[str, Kernel] = {k.name: k for k in (
    Kernel("copy", "vector", _copy, _vector_cost(1.0, 0)),
    Kernel("fill", "vector", _fill, _vector_cost(1.0, 0)),
    Kernel("binary", "vector", _binary, _skip_op_name(_vector_cost(1.0))),
    Kernel("unary", "vector", _unary, _skip_op_name(_vector_cost(2.0))),
    Kernel("threshold_backward", "vector", _threshold_backward, _vector_cost(1.0)),
    Kernel("sum", "vector", _sum, _sum_cost),
    Kernel("log_softmax", "vector", _log_softmax, _vector_cost(4.0, 4)),
    Kernel("log_softmax_backward", "vector", _log_softmax_backward, _vector_cost(4.0, 4)),
    Kernel("nll_loss", "vector", _nll_loss, _nll_loss_cost),
    Kernel("nll_loss_backward", "vector", _nll_loss_backward, _nll_loss_backward_cost),
    Kernel("matmul", "matrix", _matmul, _matmul_cost),
    Kernel("uniform", "vector", _uniform, _vector_cost(4.0)),
    Kernel("normal", "vector", _normal, _vector_cost(8.0)),
    Kernel("randint", "vector", _randint, _vector_cost(4.0)),
    Kernel("bernoulli", "vector", _bernoulli, _vector_cost(4.0)),
    Kernel("arange", "vector", _arange, _vector_cost(1.0)),
    Kernel("linspace", "vector", _linspace, _vector_cost(2.0)),
    # -- pointwise op table (pointwise.pyx)
    Kernel("unary_op", "vector", _pointwise_run(1), _pointwise_cost(1)),
    Kernel("binary_op", "vector", _pointwise_run(2), _pointwise_cost(2)),
    Kernel("ternary_op", "vector", _pointwise_run(3), _pointwise_cost(3)),
    # -- convolution (convolution.pyx)
    Kernel("im2col", "vector", _im2col, _im2col_cost),
    Kernel("col2im", "vector", _col2im, _col2im_cost),
    Kernel("depthwise_conv", "vector", _depthwise_conv, _depthwise_cost(0, 2)),
    Kernel("depthwise_conv_input_grad", "vector", _depthwise_conv_input_grad, _depthwise_cost(1, 2)),
    Kernel("depthwise_conv_weight_grad", "vector", _depthwise_conv_weight_grad, _depthwise_cost(1, 0)),
    # -- normalization (norm.pyx)
    Kernel("softmax", "vector", _softmax, _vector_cost(4.0, 4)),
    Kernel("softmax_backward", "vector", _softmax_backward, _vector_cost(3.0, 3)),
    Kernel("norm_forward", "vector", _norm_forward, _norm_cost(4.0, 7)),
    Kernel("norm_backward", "vector", _norm_backward, _norm_cost(6.0, 11)),
    # -- indexing and data movement (indexing.pyx, masking.pyx, layout.pyx, sorting.pyx)
    Kernel("index_gather", "vector", _index_gather, _index_gather_cost),
    Kernel("index_scatter", "vector", _index_scatter, _index_scatter_cost),
    Kernel("where", "vector", _where, _vector_cost(1.0, 0)),
    Kernel("count_nonzero", "vector", _count_nonzero, _data_dependent_cost),
    Kernel("nonzero", "vector", _nonzero, _data_dependent_cost),
    Kernel("masked_select", "vector", _masked_select, _data_dependent_cost),
    Kernel("masked_scatter", "vector", _masked_scatter, _data_dependent_cost),
    Kernel("flip", "vector", _flip, _vector_cost(1.0, 0)),
    Kernel("roll", "vector", _roll, _vector_cost(1.0, 0)),
    Kernel("cat", "vector", _cat, _vector_cost(1.0, 0)),
    Kernel("tril_triu", "vector", _tril_triu, _vector_cost(1.0, 0)),
    Kernel("pad", "vector", _pad, _vector_cost(2.0, 0)),
    Kernel("pad_backward", "vector", _pad_backward, _data_dependent_cost),
    Kernel("sort", "vector", _sort, _sort_cost),
    Kernel("embedding_dense_backward", "vector", _embedding_dense_backward, _embedding_backward_cost),
    # -- reductions (reduction.pyx)
    Kernel("reduce", "vector", _reduce, _reduce_cost),
    Kernel("scan", "vector", _scan, _skip_op_name(_vector_cost(1.0))),
    # -- matrix engine (gemm.pyx)
    Kernel("bmm", "matrix", _bmm, _bmm_cost),
    Kernel("addbmm", "matrix", _addbmm, _bmm_cost),
    Kernel("addr", "vector", _addr, _vector_cost(2.0, 3)),
    # -- FFT (fft.pyx)
    Kernel("fft", "vector", _fft, _fft_cost),
    # polar: a cos and a sin per element (polynomial sequences, as the transcendental table's)
    Kernel("complex_parts", "vector", _complex_parts, _complex_parts_cost),
    # complex multiply: 4 multiplies and 2 adds per element, on interleaved (re, im) lanes
    Kernel("complex_mul", "vector", _complex_mul, _vector_cost(2.0, 6)),
    # -- LAPACK linear algebra (lapack.pyx)
    *_LAPACK_KERNELS,
    # -- selection, scans, searching, histograms (selection.pyx, binning.pyx, segment.pyx)
    Kernel("order_stat", "vector", _order_stat, _order_stat_cost),
    Kernel("cum_select", "vector", _cum_select, _cum_select_cost),
    Kernel("search", "vector", _search, _search_cost),
    Kernel("histogram", "vector", _histogram, _histogram_cost),
    Kernel("segment_reduce", "vector", _segment_reduce, _segment_cost),
    Kernel("segment_reduce_backward", "vector", _segment_reduce_backward, _segment_cost),
    # -- random sampling and dropout (random.pyx)
    Kernel("exponential", "vector", _exponential, _vector_cost(12.0)),
    Kernel("cauchy", "vector", _cauchy, _vector_cost(18.0)),
    Kernel("log_normal", "vector", _log_normal, _vector_cost(16.0)),
    Kernel("geometric", "vector", _geometric, _vector_cost(20.0)),
    Kernel("multinomial", "vector", _multinomial, _multinomial_cost),
    Kernel("logspace", "vector", _logspace, _vector_cost(16.0)),
    # -- indexing extras (hashing.pyx, sorting.pyx, masking.pyx, indexing.pyx)
    Kernel("hash_xor", "vector", _hash_xor, _hash_xor_cost),
    Kernel("isin", "vector", _isin, _isin_cost),
    Kernel("nonzero_static", "vector", _nonzero_static, _data_dependent_cost),
    Kernel("repeat_interleave", "vector", _repeat_interleave, _data_dependent_cost),
    Kernel("unique", "vector", _unique, _unique_cost),
    Kernel("unique_dim", "vector", _unique_dim, _unique_dim_cost),
    # -- pooling and sampling extras (pooling.pyx, resample.pyx, distance.pyx, embedding.pyx)
    Kernel("max_pool", "vector", _max_pool, _window_cost(_pool3_window)),
    Kernel("adaptive_max_pool", "vector", _adaptive_max_pool, _window_cost(lambda *a: 1)),
    Kernel("pool_index_backward", "vector", _pool_index_backward, _window_cost(lambda *a: 1)),
    Kernel("max_unpool", "vector", _max_unpool, _window_cost(lambda *a: 1)),
    Kernel("avg_pool", "vector", _avg_pool, _window_cost(_pool3_window)),
    Kernel("avg_pool_backward", "vector", _avg_pool_backward, _window_cost(_pool3_window)),
    Kernel("adaptive_avg_pool", "vector", _adaptive_avg_pool, _window_cost(lambda *a: 1)),
    Kernel("adaptive_avg_pool_backward", "vector", _adaptive_avg_pool_backward, _window_cost(lambda *a: 1)),
    Kernel("upsample_nearest", "vector", _upsample_nearest, _window_cost(lambda *a: 1)),
    Kernel("upsample_nearest_backward", "vector", _upsample_nearest_backward, _window_cost(lambda *a: 1)),
    Kernel("upsample_separable", "vector", _upsample_separable, _window_cost(_separable_taps)),
    Kernel("upsample_separable_backward", "vector", _upsample_separable_backward, _window_cost(_separable_taps)),
    Kernel("grid_sample", "vector", _grid_sample, _grid_sample_cost),
    Kernel("embedding_bag", "vector", _embedding_bag, _embedding_bag_cost),
    Kernel("ctc_loss", "vector", _ctc_loss, _ctc_loss_cost),
    Kernel("multi_margin_loss", "vector", _multi_margin_loss, _margin_cost(False)),
    Kernel("multi_margin_loss_backward", "vector", _multi_margin_loss_backward, _margin_cost(False)),
    Kernel("multilabel_margin_loss", "vector", _multilabel_margin_loss, _margin_cost(True)),
    Kernel("multilabel_margin_loss_backward", "vector", _multilabel_margin_loss_backward, _margin_cost(True)),
    Kernel("fractional_max_pool", "vector", _fractional_max_pool, _window_cost(lambda *a: max(1, prod(a[-3:])))),
    Kernel("pairwise_distance", "vector", _pairwise_distance, _pairwise_cost),
    Kernel("pairwise_distance_backward", "vector", _pairwise_distance_backward, _pairwise_backward_cost),
    # -- RNN cells (rnn.pyx)
    Kernel("lstm_cell", "vector", _lstm_cell, _rnn_cell_cost(12.0, 30)),
    Kernel("lstm_cell_backward", "vector", _lstm_cell_backward, _rnn_cell_cost(6.0, 25)),
    Kernel("gru_cell", "vector", _gru_cell, _rnn_cell_cost(10.0, 25)),
    Kernel("gru_cell_backward", "vector", _gru_cell_backward, _rnn_cell_cost(4.0, 20)),
    # -- foreach and AMP (foreach.pyx)
    # unscale: a finiteness test and a multiply per element; Adam: ~8 vector ops and a square
    # root per element (5 operands streamed); SGD with momentum: ~4 ops (3 operands)
    Kernel("amp_unscale", "vector", _amp_unscale, _vector_cost(1.0, 2)),
    Kernel("amp_update_scale", "vector", _amp_update_scale, _scalar_kernel_cost),
    Kernel("fused_adam", "vector", _fused_adam, _vector_cost(12.0, 16)),
    Kernel("fused_sgd", "vector", _fused_sgd, _vector_cost(4.0, 5)),
    # -- losses (losses.pyx)
    Kernel("nll_loss2d", "vector", _nll_loss2d, _nll_loss2d_cost),
    Kernel("nll_loss2d_backward", "vector", _nll_loss2d_backward, _nll_loss2d_backward_cost),
    Kernel("pointwise_loss", "vector", _pointwise_loss, _pointwise_loss_cost),
    Kernel("pointwise_loss_backward", "vector", _pointwise_loss_backward, _pointwise_loss_cost),
    # -- fused kernels (fused.pyx): compiled graphs and the emu:: custom operators
    Kernel("fused_pointwise", "vector", _fused_pointwise, _fused_pointwise_cost),
    Kernel("matmul_epilogue", "matrix", _matmul_epilogue, _matmul_epilogue_cost),
    Kernel("bmm_epilogue", "matrix", _bmm_epilogue, _bmm_epilogue_cost),
    Kernel("fused_softmax", "vector", _fused_softmax, _fused_row_cost(4.0, 4, (3, 5))),
    Kernel("fused_layer_norm", "vector", _fused_layer_norm, _fused_row_cost(4.0, 7, (7, 9))),
    Kernel("fused_rms_norm", "vector", _fused_rms_norm, _fused_row_cost(1.0, 1, (3, 4))),
    Kernel("fused_keep", "vector", _fused_keep, _fused_keep_cost),
    # add + sum of squares + scale per element (the norm kernels' rate for the statistics pass)
    Kernel("fused_add_rms_norm", "vector", _fused_add_rms_norm, _row_kernel_cost(4.0, 5)),
    Kernel("row_normalize", "vector", _row_normalize, _row_kernel_cost(3.0, 3)),
    # -- fused attention (attention.pyx): matrix and vector engines of the same cores
    Kernel("attention", "matrix", _attention, _attention_cost),
    Kernel("attention_backward", "matrix", _attention_backward, _attention_backward_cost),
    # -- quantized and low-precision GEMMs (quantized.pyx)
    *_QUANTIZED_KERNELS,
)}
