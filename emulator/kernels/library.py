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
    # -- convolution, pooling, upsampling (conv.pyx)
    # -- normalization (norm.pyx)
    # -- indexing and data movement (indexing.pyx)
    # -- reductions (reduction.pyx)
    # -- matrix engine (gemm.pyx)
    # -- losses (losses.pyx)
)}
