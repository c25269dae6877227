"""Reductions lowered to the vector engine: sum over a set of dimensions.

``x.sum()``, ``x.sum(dim)``, ``x.sum(dim, keepdim=True)`` and ``x.sum(dtype=...)`` reach
``aten::sum.dim_IntList`` (``aten::sum`` and ``aten::sum.out`` are CompositeExplicitAutograd
and redispatch to ``sum.dim_IntList`` / ``sum.IntList_out``).

dtype rules are CPU's: ``dtype=`` wins; else an ``out=`` tensor's dtype; else integer and bool
inputs give int64 and floating inputs keep their dtype. The input is cast to that dtype first
and summed in float32 (float16/bfloat16/float32), float64 or int64 (integers and bool,
wrapping), then rounded once. An empty reduction gives 0.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import SUPPORTED, TO_CODE
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt


def _reduced_dims(op: str, ndim: int, dim) -> tuple:
    if dim is None or len(dim) == 0:
        return tuple(range(ndim))
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    seen = []
    for d in dim:
        if not lo <= d <= hi:
            raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {d})")
        d = d % max(ndim, 1)
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        seen.append(d)
    return tuple(d for d in seen if d < ndim)  # a 0-dim tensor reduces over nothing


def _sum(x, dim, keepdim, dtype, out=None):
    name = "aten::sum"
    device = common_device(name, x)
    if x.dtype not in SUPPORTED:
        raise unsupported_dtype(name, x.dtype, SUPPORTED)
    if out is not None:
        common_device(name, out, x)
        if dtype is not None and out.dtype != dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
        dtype = out.dtype
    elif dtype is None:
        dtype = x.dtype if x.dtype.is_floating_point else torch.int64
    if dtype not in SUPPORTED:
        raise unsupported_dtype(name, dtype, SUPPORTED)
    dims = _reduced_dims(name, x.dim(), dim)
    keep_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    shape = keep_shape if keepdim else tuple(n for d, n in enumerate(x.shape) if d not in dims)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=torch.device("emu", device))
    else:
        resize_out(out, shape)
        check_overlap(name, out, x)
    if out.numel() == 0:
        return out
    if x.numel() == 0:
        return out.zero_()
    if keepdim:
        out_strides = tuple(out.stride())
    else:
        it = iter(out.stride())
        out_strides = tuple(0 if d in dims else next(it) for d in range(x.dim()))
    dim_mask = sum(1 << d for d in dims)  # launch arguments are scalars: the dims as a bit mask
    rt().launch("sum", (device_ref(out, keep_shape, out_strides), device_ref(x), dim_mask, TO_CODE[dtype]),
                current_stream(device))
    return out


def sum_dim(x, dim=None, keepdim=False, *, dtype=None):
    return _sum(x, dim, keepdim, dtype)


def sum_out(x, dim=None, keepdim=False, *, dtype=None, out):
    return _sum(x, dim, keepdim, dtype, out)
