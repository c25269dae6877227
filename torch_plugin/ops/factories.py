"""Fills and sequence factories: fill_, zero_, arange, linspace, eye.

``zeros``/``ones``/``full``/``empty_like`` are ATen composites of the C++
``empty`` and these kernels; ``eye`` is composite (zero fill, then a fill of
the diagonal view).
"""
from __future__ import annotations

import math

import torch

from torch_plugin.ops._common import check_dtype, current_stream, device_ref, rt


def _python_value(value, dtype):
    if isinstance(value, complex):
        raise RuntimeError("fill_: complex values are not supported on emu")
    if dtype == torch.bool:
        return bool(value)
    if not dtype.is_floating_point:
        if isinstance(value, float) and not math.isfinite(value):
            raise RuntimeError(f"value cannot be converted to type {dtype} without overflow")
        return int(value)
    return float(value)


def fill_scalar(t, value):
    check_dtype("aten::fill_", t)
    if t.numel():
        rt().memset(device_ref(t), _python_value(value, t.dtype), current_stream(t.device.index))
    return t


def fill_tensor(t, value):
    if value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    if value.device.type == "emu" and value.device == t.device:
        if t.numel():  # stays on the device: a broadcast copy
            rt().launch("copy", (device_ref(t), device_ref(value, t.shape, (0,) * t.dim())),
                        current_stream(t.device.index))
        return t
    return fill_scalar(t, value.item())


def zero_(t):
    return fill_scalar(t, False if t.dtype == torch.bool else 0)


def _sequence_out(out, n):
    check_dtype("aten::arange", out)
    if out.device.type != "emu":
        raise RuntimeError(f"expected an emu output, got {out.device}")
    if tuple(out.shape) != (n,):
        out.resize_((n,))
    return out


def arange_out(start, end, step=1, *, out):
    start, end, step = (s.item() if isinstance(s, torch.Tensor) else s for s in (start, end, step))
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not all(math.isfinite(float(v)) for v in (start, end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    integral = not out.dtype.is_floating_point and all(isinstance(v, int) for v in (start, end, step))
    n = -(-(end - start) // step) if integral else math.ceil((end - start) / step)
    _sequence_out(out, int(n))
    if n > 0:
        rt().launch("arange", (device_ref(out), int(n), start, step), current_stream(out.device.index))
    return out


def linspace_out(start, end, steps, *, out):
    start, end = (s.item() if isinstance(s, torch.Tensor) else s for s in (start, end))
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    _sequence_out(out, steps)
    if steps > 0:
        rt().launch("linspace", (device_ref(out), int(steps), float(start), float(end)),
                    current_stream(out.device.index))
    return out


def eye_m_out(n, m, *, out):
    if n < 0 or m < 0:
        raise RuntimeError(f"n and m must be greater or equal to 0, got {n} and {m}")
    if tuple(out.shape) != (n, m):
        out.resize_((n, m))
    zero_(out)
    if min(n, m) > 0:
        fill_scalar(out.diagonal(), 1)
    return out


def eye_out(n, *, out):
    return eye_m_out(n, n, out=out)
