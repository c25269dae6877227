"""Fills and sequence factories: fill_, zero_, arange, linspace, eye.

``zeros``/``ones``/``full``/``empty_like`` are ATen composites of the C++
``empty`` and these kernels; ``eye`` is composite (zero fill, then a fill of
the diagonal view).
"""
from __future__ import annotations

import math
import warnings

import torch

from torch_plugin.ops._common import check_dtype, check_storable, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)


_FLOAT8_C10 = {torch.float8_e4m3fn: "c10::Float8_e4m3fn", torch.float8_e5m2: "c10::Float8_e5m2",
               torch.float8_e4m3fnuz: "c10::Float8_e4m3fnuz", torch.float8_e5m2fnuz: "c10::Float8_e5m2fnuz"}


def _overflow(dtype):
    return RuntimeError(f"value cannot be converted to type {dtype} without overflow")


def _part_name(dtype) -> str:
    return "float" if dtype == torch.float32 else "double"


def _c10_name(dtype) -> str:
    """The C++ type name CPU's overflow message uses."""
    names = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
             torch.bfloat16: "c10::BFloat16", torch.bool: "bool"}
    if dtype in names:
        return names[dtype]
    return f"{str(dtype).removeprefix('torch.')}_t"


def _fill_complex(t, value: complex):
    """A complex fill: one launch when the imaginary part is +0.0 (the kernel stores a real value
    as value + 0j), else one per part (float views of the real and imaginary parts)."""
    stream = current_stream(t.device.index)
    if value.imag == 0 and math.copysign(1.0, value.imag) > 0:
        rt().memset(device_ref(t), float(value.real), stream)
        return
    parts = torch.view_as_real(t)
    rt().memset(device_ref(parts[..., 0]), float(value.real), stream)
    rt().memset(device_ref(parts[..., 1]), float(value.imag), stream)


def _python_value(value, dtype):
    """The fill value as the kernel takes it, with CPU's (c10::checked_convert) range checks: an
    out-of-range value raises instead of silently wrapping (int8 fill_(300) used to store 44)."""
    if dtype.is_complex:
        # Each part checked as the part's dtype (c10::checked_convert to c10::complex<T>).
        part = torch.float32 if dtype == torch.complex64 else torch.float64
        value = complex(value)
        for v in (value.real, value.imag):
            if part != torch.float64 and math.isfinite(v) and abs(v) > torch.finfo(part).max:
                raise RuntimeError(f"value cannot be converted to type c10::complex<{_part_name(part)}> "
                                   "without overflow")
        return value
    if isinstance(value, complex):
        if value.imag != 0:  # CPU: a real dtype takes a complex value only when its imaginary part is 0
            raise _overflow(_c10_name(dtype))
        value = value.real
    if dtype == torch.bool:
        return bool(value)
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if isinstance(value, float):
            if not math.isfinite(value) or value < info.min or value > info.max:
                raise _overflow(dtype)
            return int(value)  # truncates, like the C++ cast
        value = int(value)
        if info.min == 0 and value < 0:
            # c10 lets a negative integer wrap into an unsigned type down to -max (uint8: -1 -> 255)
            if -value > info.max:
                raise _overflow(dtype)
            return value % (info.max + 1)
        if not info.min <= value <= info.max:
            raise _overflow(dtype)
        return value
    value = float(value)
    if dtype in _FLOAT8_C10:   # c10's check, in its names; the formats without inf refuse inf too
        if (math.isinf(value) and dtype != torch.float8_e5m2) or (
                math.isfinite(value) and abs(value) > torch.finfo(dtype).max):
            raise RuntimeError(f"value cannot be converted to type {_FLOAT8_C10[dtype]} without overflow")
        return value
    if dtype != torch.float64 and math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
        raise _overflow(dtype)  # inf and NaN are fine; a finite value beyond the type's max is not
    return value


@OVERLOADS.implements("fill_.Scalar")
def fill_scalar(t, value):
    check_storable("aten::fill_", t)
    value = _python_value(value, t.dtype)
    if t.numel():
        if t.is_complex():
            _fill_complex(t, value)
        else:
            rt().memset(device_ref(t), value, current_stream(t.device.index))
    return t


@OVERLOADS.implements("fill_.Tensor")
def fill_tensor(t, value):
    if value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    if value.device.type == "emu" and value.device == t.device:
        # Stays on the device: a broadcast copy, as CPU's fill_ with a same-device value (a complex
        # value into a real t keeps the real part, with copy_'s warning).
        if value.is_conj() or value.is_neg():  # the stored bits are not the value: copy_ resolves them
            t.copy_(value)
            return t
        check_storable("aten::fill_", t, value)
        if value.is_complex() and not t.is_complex() and t.dtype != torch.bool:
            warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3)
        if t.numel():
            rt().launch("copy", (device_ref(t), device_ref(value, t.shape, (0,) * t.dim())),
                        current_stream(t.device.index))
        return t
    return fill_scalar(t, value.item())


@OVERLOADS.implements("zero_")
def zero_(t):
    return fill_scalar(t, False if t.dtype == torch.bool else 0)


def _sequence_out(out, n):
    check_dtype("aten::arange", out)
    if out.device.type != "emu":
        raise RuntimeError(f"expected an emu output, got {out.device}")
    if tuple(out.shape) != (n,):
        out.resize_((n,))
    return out


def _check_sequence_dtype(op: str, out) -> None:
    check_dtype(f"aten::{op}", out)
    if out.dtype == torch.bool:  # as on CPU, rather than a plausible-looking cast
        raise NotImplementedError(f"\"{op}\" not implemented for 'Bool' (on emu, as on CPU)")


@OVERLOADS.implements("arange.start_out")
def arange_out(start, end, step=1, *, out):
    _check_sequence_dtype("arange", out)
    start, end, step = (s.item() if isinstance(s, torch.Tensor) else s for s in (start, end, step))
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not all(math.isfinite(float(v)) for v in (start, end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    if not out.dtype.is_floating_point:
        # CPU (RangeFactories.cpp) truncates start/end/step to int64 for the values, start + i*step;
        # the length is an integer formula on the truncated values for int64 and ceil((end -
        # start) / step) on the original ones for the other integer types. Passing the float
        # arguments to the kernel gave e.g. arange(0, 5, 1.5, dtype=int64) == [0, 1, 3, 4] (CPU:
        # [0, 1, 2, 3, 4]) and arange(-2.5, 2, dtype=int64) a fifth element.
        xstart, xend, xstep = (int(v) for v in (start, end, step))
        if out.dtype == torch.int64:
            if xstep == 0:
                raise RuntimeError("step must be nonzero")
            sign = (xstep > 0) - (xstep < 0)
            span = xend - xstart + xstep - sign
            n = abs(span) // abs(xstep) * (1 if (span >= 0) == (xstep > 0) else -1)  # C++ int64 division
        else:
            n = -(-(end - start) // step) if all(isinstance(v, int) for v in (start, end, step)) \
                else math.ceil((end - start) / step)
        start, step = xstart, xstep
    else:
        n = math.ceil((end - start) / step)
    n = max(int(n), 0)
    _sequence_out(out, n)
    if n > 0:
        rt().launch("arange", (device_ref(out), int(n), start, step), current_stream(out.device.index))
    return out


@OVERLOADS.implements("linspace.out")
def linspace_out(start, end, steps, *, out):
    start, end = (s.item() if isinstance(s, torch.Tensor) else s for s in (start, end))
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    # CPU converts start and end to the output dtype first (checked: an out-of-range value raises;
    # integers truncate, float16 rounds), then interpolates: linspace(0.7, 3.9, 5, dtype=int64)
    # is [0, 0, 1, 2, 3] there, and was [0, 1, 2, 3, 3] here.
    _check_sequence_dtype("linspace", out)
    start, end = (_python_value(v, out.dtype) for v in (start, end))
    if out.dtype.is_floating_point:
        start, end = (torch.tensor(v, dtype=torch.float64).to(out.dtype).item() for v in (start, end))
    _sequence_out(out, steps)
    if steps == 1:
        # ATen fills start when steps == 1; the kernel's symmetric formula gave end.
        return fill_scalar(out, start)
    if steps > 0:
        rt().launch("linspace", (device_ref(out), int(steps), float(start), float(end)),
                    current_stream(out.device.index))
    return out


@OVERLOADS.implements("eye.m_out")
def eye_m_out(n, m, *, out):
    if n < 0 or m < 0:
        raise RuntimeError(f"n and m must be greater or equal to 0, got {n} and {m}")
    if tuple(out.shape) != (n, m):
        out.resize_((n, m))
    zero_(out)
    if min(n, m) > 0:
        fill_scalar(out.diagonal(), 1)
    return out


@OVERLOADS.implements("eye.out")
def eye_out(n, *, out):
    return eye_m_out(n, n, out=out)


@OVERLOADS.implements("_efficientzerotensor")
def efficient_zero_tensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::_efficientzerotensor (autograd's zero gradients, e.g. sgn's for real inputs): CUDA
    returns a ZeroTensor that owns no memory; here a device tensor of zeros, the same values."""
    out = torch.empty(size, dtype=dtype if dtype is not None else torch.get_default_dtype(),
                      device=device if device is not None else torch.device("emu", torch.emu.current_device()))
    return zero_(out)
