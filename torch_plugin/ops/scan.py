"""Scans lowered to the vector engine: cumsum and cumprod (functional, .out and in-place), one launch
each of the kernel library's "scan" kernel (emulator/kernels/reduction.pyx). Result dtypes, out= rules
and errors are CPU's (the reductions' rules, ops/reduction.py: integer and bool inputs give int64
unless ``dtype=`` or an ``out=`` says otherwise); accumulation in CPU's acc_type (float64 for float32).
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import TO_CODE, type_meta_name
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops.reduction import _accumulating_dtype, _check_supported, _output, _wrap_dim

OVERLOADS = Overloads(__name__)


def _scan(op, x, dim, dtype, out=None, inplace=False):
    name = f"aten::cum{op}"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if inplace:
        if dtype is not None and dtype != x.dtype:
            raise RuntimeError(f"Bad in-place call: input tensor dtype {type_meta_name(x.dtype)} and "
                               f"output tensor dtype {type_meta_name(dtype)} should match")
        dtype = x.dtype
        out = x
    else:
        dtype = _accumulating_dtype(x, dtype, out)
    _check_supported(name, dtype)
    if dtype == torch.bool:
        raise NotImplementedError(f"\"cum{op}_out_cpu\" not implemented for 'Bool'")
    d = _wrap_dim(dim, x.dim())
    if inplace:
        check_overlap(f"{name}_", x, x)
    else:
        out = _output(name, x, x.shape, dtype, out)
    if out.numel() == 0:
        return out
    if x.dim() == 0:
        shape, x_strides, out_strides = (1,), (0,), (0,)
    else:
        shape, x_strides, out_strides = tuple(x.shape), tuple(x.stride()), tuple(out.stride())
    rt().launch("scan", (op, device_ref(out, shape, out_strides), device_ref(x, shape, x_strides), d,
                         TO_CODE[dtype]), current_stream(x.get_device()))
    return out


def _scan_overloads(op: str) -> dict:
    """{overload: kernel} for cum``op``'s functional, out= and in-place forms."""
    def functional(x, dim, *, dtype=None):
        return _scan(op, x, dim, dtype)

    def out_form(x, dim, *, dtype=None, out):
        return _scan(op, x, dim, dtype, out)

    def inplace(x, dim, *, dtype=None):
        return _scan(op, x, dim, dtype, inplace=True)
    return {f"cum{op}": functional, f"cum{op}.out": out_form, f"cum{op}_": inplace}


for _op in ("sum", "prod"):
    OVERLOADS.update(_scan_overloads(_op))
