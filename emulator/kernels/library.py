"""The device's kernel library: each kernel's functional body and cost model.

A kernel is named in a launch command. Firmware resolves the command's tensor
descriptors to ``Operand``s (host pointers into HBM after MMU translation) and
asks this table which engine runs the kernel, how long it takes, and then runs
the functional body, a Cython routine that reads and writes device memory.

The cost model is the roofline of the engine: the larger of compute time on the
engine and the time to stream the operands through HBM.
"""
from __future__ import annotations

import array
import importlib
from dataclasses import dataclass
from math import prod
from typing import Callable, NamedTuple

from emulator.errors import KernelArgumentError
from emulator.kernels import dtypes


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
        return self.numel * dtypes.ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class Kernel:
    name: str
    engine: str                          # "vector" | "matrix"
    run: Callable                        # run(*args) on resolved operands
    cost: Callable                       # cost(device, *args) -> (ns, bytes, flops)


_loaded: dict = {}


def _module(name: str):
    # Imported on first launch so that importing the emulator needs no compiled code.
    module = _loaded.get(name)
    if module is None:
        module = _loaded[name] = importlib.import_module(f"emulator.kernels.{name}")
    return module


def _roofline(device, compute_ns: float, nbytes: int, flops: int):
    return max(compute_ns, device.hbm.transfer_ns(nbytes)), nbytes, flops


def _vector_cost(cycles_per_group: float, flops_per_element: int = 1):
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        out = operands[0]
        moved = sum(o.nbytes for o in operands)
        return _roofline(device, device.vector_engine.elementwise_ns(out.numel, cycles_per_group),
                         moved, out.numel * flops_per_element)
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
                   "logit_backward": 4, "lerp": 2, "addcmul": 2, "addcdiv": 4}


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
        operands = [out] + [x for x in rest[:arity] if type(x) is Operand]
        moved = sum(o.nbytes for o in operands)
        cycles = pointwise_cycles(op)
        return _roofline(device, device.vector_engine.elementwise_ns(out.numel, cycles), moved,
                         out.numel * max(1, int(cycles)))
    return cost


def _unary(op: str, out: Operand, a: Operand, compute_dtype: int):
    _module('elementwise').unary(op, out.addr, out.dtype, out.strides, a.addr, a.dtype, a.strides,
                        out.shape, compute_dtype)


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
    return _roofline(device, device.vector_engine.elementwise_ns(inp.numel, 1.0), moved, inp.numel)


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
    moved = a.nbytes + b.nbytes + out.nbytes + (c.nbytes if c is not None else 0)
    return _roofline(device, device.matrix_engine.gemm_ns(M, N, K), moved, 2 * M * N * K)


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
    return _roofline(device, device.vector_engine.elementwise_ns(n, 4.0), moved, 2 * n)


def _nll_loss_backward_cost(device, grad_input, grad_output, target, weight, total_weight, *rest):
    # Zero-fills grad_input and scatters one value per sample.
    n = grad_input.shape[0]
    moved = grad_input.nbytes + grad_output.nbytes + target.nbytes + total_weight.nbytes \
        + (n * dtypes.ITEMSIZE[weight.dtype] if weight is not None else 0)
    return _roofline(device, device.vector_engine.elementwise_ns(grad_input.numel + n, 1.0), moved,
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
    moved = a.nbytes + b.nbytes + out.nbytes + (c.nbytes if c is not None else 0)
    return _roofline(device, batch * device.matrix_engine.gemm_ns(M, N, K), moved, 2 * batch * M * N * K)


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
    return _roofline(device, device.vector_engine.elementwise_ns(inp.numel, cycles), moved,
                     int(inp.numel * cycles))


def _scan(op: str, out: Operand, inp: Operand, dim: int, compute_dtype: int):
    _module('reduction').scan(op, out.addr, out.dtype, out.strides, inp.addr, inp.dtype, inp.strides,
                              inp.shape, dim, compute_dtype)


def _im2col(col: Operand, x: Operand, *params):
    """``col`` is (C, kD, kH, kW, oD, oH, oW), ``x`` is (C, D, H, W); ``params`` = the 9 ints
    (stride, padding, dilation per spatial dim) -- launch arguments are scalars."""
    _module('conv').im2col(col.addr, col.dtype, col.strides, col.shape, x.addr, x.dtype, x.strides, x.shape,
                           params)


def _im2col_cost(device, col: Operand, x: Operand, *params):
    # A gather (DMA-like): every column entry is written once, the image is streamed once.
    moved = col.nbytes + x.nbytes
    return _roofline(device, device.vector_engine.elementwise_ns(col.numel, 1.0), moved, 0)


def _col2im(out: Operand, col: Operand, bias: Operand | None, *params):
    b_addr, b_dtype, b_stride = (0, dtypes.FLOAT32, 0) if bias is None else (bias.addr, bias.dtype, bias.strides[0])
    _module('conv').col2im(out.addr, out.dtype, out.strides, out.shape, col.addr, col.dtype, col.strides,
                           col.shape, b_addr, b_dtype, b_stride, params)


def _col2im_cost(device, out: Operand, col: Operand, bias, *params):
    # One add per column entry into the image (held in scratchpad), then the image is written once.
    moved = col.nbytes + out.nbytes + (bias.nbytes if bias is not None else 0)
    return _roofline(device, device.vector_engine.elementwise_ns(col.numel + out.numel, 1.0), moved, col.numel)


def _pool_args(op: Operand):
    return op.addr, op.dtype, op.strides, op.shape


def _max_pool2d(out: Operand, indices: Operand, x: Operand, *window):
    _module('conv').max_pool2d(*_pool_args(out), indices.addr, indices.strides, *_pool_args(x), *window)


def _max_pool2d_backward(grad_input: Operand, grad_output: Operand, indices: Operand):
    _module('conv').max_pool2d_backward(*_pool_args(grad_input), *_pool_args(grad_output), indices.addr,
                                        indices.strides)


def _avg_pool2d(out: Operand, x: Operand, *window):
    _module('conv').avg_pool2d(*_pool_args(out), *_pool_args(x), *window)


def _avg_pool2d_backward(grad_input: Operand, grad_output: Operand, *window):
    _module('conv').avg_pool2d_backward(*_pool_args(grad_input), *_pool_args(grad_output), *window)


def _adaptive_avg_pool2d(out: Operand, x: Operand):
    _module('conv').adaptive_avg_pool2d(*_pool_args(out), *_pool_args(x))


def _adaptive_avg_pool2d_backward(grad_input: Operand, grad_output: Operand):
    _module('conv').adaptive_avg_pool2d_backward(*_pool_args(grad_input), *_pool_args(grad_output))


def _upsample_nearest2d(out: Operand, x: Operand, scale_h: float, scale_w: float):
    _module('conv').upsample_nearest2d(*_pool_args(out), *_pool_args(x), scale_h, scale_w)


def _upsample_nearest2d_backward(grad_input: Operand, grad_output: Operand, scale_h: float, scale_w: float):
    _module('conv').upsample_nearest2d_backward(*_pool_args(grad_input), *_pool_args(grad_output), scale_h, scale_w)


def _upsample_bilinear2d(out: Operand, x: Operand, align_corners: bool, scale_h: float, scale_w: float):
    _module('conv').upsample_bilinear2d(*_pool_args(out), *_pool_args(x), align_corners, scale_h, scale_w)


def _upsample_bilinear2d_backward(grad_input: Operand, grad_output: Operand, align_corners: bool,
                                  scale_h: float, scale_w: float):
    _module('conv').upsample_bilinear2d_backward(*_pool_args(grad_input), *_pool_args(grad_output),
                                                 align_corners, scale_h, scale_w)


def _window_cost(reads_per_output):
    """Cost of a windowed kernel (pooling, upsampling): ``reads_per_output(*args)`` inputs are read per
    element of the first operand (a backward pass scatters as many); HBM streams every operand once."""
    def cost(device, *args):
        operands = [a for a in args if isinstance(a, Operand)]
        moved = sum(o.nbytes for o in operands)
        work = max(o.numel for o in operands) * reads_per_output(*args)
        return _roofline(device, device.vector_engine.elementwise_ns(work, 1.0), moved, work)
    return cost


def _pool_window(*args):
    ints = [a for a in args if type(a) is int]
    return max(1, ints[0] * ints[1]) if len(ints) >= 2 else 1


def _softmax(out: Operand, inp: Operand, dim: int):
    _module('norm').softmax(out.addr, out.dtype, out.strides, inp.addr, inp.dtype, inp.strides, inp.shape, dim)


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
        return _roofline(device, device.vector_engine.elementwise_ns(n, cycles_per_element), moved,
                         n * flops_per_element)
    return cost


# -- indexing and data movement (indexing.pyx): wrappers. Variadic launch arguments carry
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


def _indexed_cost(device, table: Operand, nidx: int, rest):
    # Per iterated element (the index operands' shape): its index values are read, one table
    # element is read (or read-modified-written) and one element of the other side moves; a few
    # vector cycles go to address generation. The table is not streamed whole.
    indices = [a for a in rest if isinstance(a, Operand)][-nidx:]
    n = indices[0].numel
    moved = 2 * n * dtypes.ITEMSIZE[table.dtype] + sum(o.nbytes for o in indices)
    return _roofline(device, device.vector_engine.elementwise_ns(n, 3.0), moved, n)


def _index_gather_cost(device, out, table, allow_negative, message, nidx, *rest):
    return _indexed_cost(device, table, nidx, rest)


def _index_scatter_cost(device, table, values, reduce, alpha, include_self, allow_negative, message, nidx, *rest):
    return _indexed_cost(device, table, nidx, rest)


def _where(out: Operand, cond: Operand, a, b, compute_dtype: int):
    ndim = len(out.shape)
    if type(a) is not Operand:
        keep_a, a = _immediate(a, compute_dtype, ndim)
    if type(b) is not Operand:
        keep_b, b = _immediate(b, compute_dtype, ndim)
    _module('indexing').where(out.addr, out.dtype, out.strides, cond.addr, cond.dtype, cond.strides,
                              a.addr, a.dtype, a.strides, b.addr, b.dtype, b.strides, out.shape, compute_dtype)


def _count_nonzero(out: Operand, src: Operand):
    _module('indexing').count_nonzero(out.addr, src.addr, src.dtype, src.strides, src.shape)


def _nonzero(out: Operand, src: Operand, rows: int):
    _module('indexing').nonzero(out.addr, out.strides, rows, src.addr, src.dtype, src.strides, src.shape)


def _masked_select(out: Operand, src: Operand, mask: Operand, rows: int):
    _module('indexing').masked_select(out.addr, out.strides[0] if out.strides else 1, rows, src.addr, src.dtype,
                                      src.strides, mask.addr, mask.dtype, mask.strides, src.shape)


def _masked_scatter(out: Operand, mask: Operand, source: Operand):
    _module('indexing').masked_scatter(out.addr, out.dtype, out.strides, mask.addr, mask.dtype, mask.strides,
                                       source.addr, source.strides[0], source.numel, out.shape)


def _flip(out: Operand, src: Operand, dim_mask: int):
    _module('indexing').flip(out.addr, out.dtype, out.strides, src.addr, src.strides, out.shape, dim_mask)


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
    _module('indexing').tril_triu(out.addr, out.dtype, out.strides, src.addr, src.strides, out.shape, diagonal, upper)


def _pad(out: Operand, src: Operand, mode: int, *pads_before):
    _module('indexing').pad(out.addr, out.strides, src.addr, src.strides, out.dtype, out.shape, src.shape,
                            pads_before, mode, False)


def _pad_backward(grad_input: Operand, grad_output: Operand, mode: int, *pads_before):
    _module('indexing').pad(grad_output.addr, grad_output.strides, grad_input.addr, grad_input.strides,
                            grad_input.dtype, grad_output.shape, grad_input.shape, pads_before, mode, True)


def _sort(values: Operand, indices: Operand, src: Operand, dim: int, descending: bool):
    _module('indexing').sort(values.addr, values.strides, indices.addr, indices.strides, src.addr, src.dtype,
                             src.strides, src.shape, dim, descending, values.shape[dim])


def _sort_cost(device, values, indices, src, dim, descending):
    # A merge sort per slice: n log2(n) compare-and-move steps on the vector engine.
    n = max(src.shape[dim], 1)
    steps = src.numel * max(1, (n - 1).bit_length())
    moved = src.nbytes + values.nbytes + indices.nbytes
    return _roofline(device, device.vector_engine.elementwise_ns(steps, 2.0), moved, steps)


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
    return _roofline(device, device.vector_engine.elementwise_ns(grad_weight.numel + grad.numel, 1.0), moved,
                     grad.numel)


def _data_dependent_cost(device, *args):
    # Reads every element of the inputs once, writes the outputs.
    moved = sum(a.nbytes for a in args if isinstance(a, Operand))
    n = max(a.numel for a in args if isinstance(a, Operand))
    return _roofline(device, device.vector_engine.elementwise_ns(n, 1.0), moved, 0)


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
    return _roofline(device, device.vector_engine.elementwise_ns(n, 4.0), moved, 2 * n)


def _nll_loss2d_backward_cost(device, grad_input, grad_output, target, weight, total_weight, *rest):
    n = target.numel
    moved = grad_input.nbytes + grad_output.nbytes + target.nbytes + total_weight.nbytes \
        + (n * dtypes.ITEMSIZE[weight.dtype] if weight is not None else 0)
    return _roofline(device, device.vector_engine.elementwise_ns(grad_input.numel + n, 1.0), moved,
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
    return _roofline(device, device.vector_engine.elementwise_ns(x.numel, 8.0), moved, 6 * x.numel)


# -- wrappers: FFT (fft.pyx)


# -- wrappers: LAPACK linear algebra (lapack.pyx)


# -- wrappers: selection, scans, searching, histograms (selection.pyx)


# -- wrappers: random sampling and dropout (random.pyx)


# -- wrappers: indexing extras (indexing.pyx, second block)


# -- wrappers: pooling and sampling extras (conv.pyx, second block)


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
    # -- convolution, pooling, upsampling (conv.pyx)
    Kernel("im2col", "vector", _im2col, _im2col_cost),
    Kernel("col2im", "vector", _col2im, _col2im_cost),
    Kernel("max_pool2d", "vector", _max_pool2d, _window_cost(_pool_window)),
    Kernel("max_pool2d_backward", "vector", _max_pool2d_backward, _window_cost(lambda *a: 1)),
    Kernel("avg_pool2d", "vector", _avg_pool2d, _window_cost(_pool_window)),
    Kernel("avg_pool2d_backward", "vector", _avg_pool2d_backward, _window_cost(_pool_window)),
    Kernel("adaptive_avg_pool2d", "vector", _adaptive_avg_pool2d, _window_cost(lambda *a: 1)),
    Kernel("adaptive_avg_pool2d_backward", "vector", _adaptive_avg_pool2d_backward, _window_cost(lambda *a: 1)),
    Kernel("upsample_nearest2d", "vector", _upsample_nearest2d, _window_cost(lambda *a: 1)),
    Kernel("upsample_nearest2d_backward", "vector", _upsample_nearest2d_backward, _window_cost(lambda *a: 1)),
    Kernel("upsample_bilinear2d", "vector", _upsample_bilinear2d, _window_cost(lambda *a: 4)),
    Kernel("upsample_bilinear2d_backward", "vector", _upsample_bilinear2d_backward, _window_cost(lambda *a: 4)),
    # -- normalization (norm.pyx)
    Kernel("softmax", "vector", _softmax, _vector_cost(4.0, 4)),
    Kernel("softmax_backward", "vector", _softmax_backward, _vector_cost(3.0, 3)),
    Kernel("norm_forward", "vector", _norm_forward, _norm_cost(4.0, 7)),
    Kernel("norm_backward", "vector", _norm_backward, _norm_cost(6.0, 11)),
    # -- indexing and data movement (indexing.pyx)
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
    # -- LAPACK linear algebra (lapack.pyx)
    # -- selection, scans, searching, histograms (selection.pyx)
    # -- random sampling and dropout (random.pyx)
    # -- indexing extras (indexing.pyx, second block)
    # -- pooling and sampling extras (conv.pyx, second block)
    # -- losses (losses.pyx)
    Kernel("nll_loss2d", "vector", _nll_loss2d, _nll_loss2d_cost),
    Kernel("nll_loss2d_backward", "vector", _nll_loss2d_backward, _nll_loss2d_backward_cost),
    Kernel("pointwise_loss", "vector", _pointwise_loss, _pointwise_loss_cost),
    Kernel("pointwise_loss_backward", "vector", _pointwise_loss_backward, _pointwise_loss_cost),
)}
