"""Shared helpers of the cost-model tests: devices without memory, operand descriptions."""
from __future__ import annotations

import dataclasses

from emulator.config import describe, from_dict, load_preset
from emulator.device import CostDevice
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS, Operand

BF16, F16, F32, F64, I64 = dtypes.BFLOAT16, dtypes.FLOAT16, dtypes.FLOAT32, dtypes.FLOAT64, dtypes.INT64


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def system(preset: str = "default", **over):
    """A preset with nested overrides, e.g. system("default", device={"cores": 8})."""
    return from_dict(merge(describe(load_preset(preset)), over))


def device(preset: str = "default", fidelity: str = "kernel", **over) -> CostDevice:
    return CostDevice(system(preset, **over).device, fidelity=fidelity)


def contiguous_strides(shape) -> tuple:
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def op(dtype: int, *shape, strides=None) -> Operand:
    if strides is None:
        strides = contiguous_strides(shape)
    return Operand(_address(), dtype, tuple(shape), tuple(strides))


_next = [0]


def _address() -> int:
    """A fresh address per operand (4 TiB apart): distinct operands never alias in the cost model
    (emulator/memory.py reads operands with the same address range once)."""
    _next[0] += 1
    return _next[0] << 42


def matmul(dev, M, N, K, dtype=BF16):
    return KERNELS["matmul"].cost(dev, op(dtype, M, N), op(dtype, M, K), op(dtype, K, N), None, 0.0, 1.0)


def bmm(dev, B, M, N, K, dtype=BF16):
    return KERNELS["bmm"].cost(dev, op(dtype, B, M, N), op(dtype, B, M, K), op(dtype, B, K, N), None, 0.0, 1.0)


def add(dev, n, dtype=F32):
    return KERNELS["binary"].cost(dev, "add", op(dtype, n), op(dtype, n), op(dtype, n), dtype, 1.0)


def softmax(dev, rows, cols, dtype=F32):
    x = op(dtype, rows, cols)
    return KERNELS["softmax"].cost(dev, x, x, 1)


def im2col(dev, C, H, W, k, dtype=F32):
    oh, ow = H - k + 1, W - k + 1
    col = op(dtype, C, 1, k, k, 1, oh, ow)
    x = op(dtype, C, 1, H, W)
    return KERNELS["im2col"].cost(dev, col, x, 1, 1, 1, 0, 0, 0, 1, 1, 1)


def conv(dev, N, C, H, W, O, k, dtype=F32):
    """A convolution as the library runs it: im2col per image, then one GEMM."""
    oh, ow = H - k + 1, W - k + 1
    gather = im2col(dev, C, H, W, k, dtype)
    gemm = matmul(dev, O, oh * ow, C * k * k, dtype)
    return [gather] * N + [gemm] * N


def attention(dev, heads, seq, dim, dtype=BF16):
    """scores = q @ k^T, softmax, @ v."""
    return [bmm(dev, heads, seq, seq, dim, dtype), softmax(dev, heads * seq, seq, F32),
            bmm(dev, heads, seq, dim, seq, dtype)]


def replace_device(cfg, **fields):
    return dataclasses.replace(cfg, **fields)
