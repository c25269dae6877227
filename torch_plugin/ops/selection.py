"""Selection on emu: order statistics and running extrema (emulator/kernels/selection.pyx).

Native: median / nanmedian (all, .dim, .dim_values), mode, kthvalue (+ .values),
_cummax_helper / _cummin_helper, _logcumsumexp (+ .out). aminmax (+ .out) launches the generic
reduction kernel twice (min and max).

Indices follow CPU's algorithms (see selection.pyx): median's lower median with the first NaN
for torch.median; kthvalue's quickselect; mode's introsort.

Left out: complex dtypes.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import SUPPORTED, scalar_type_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops.reduction import (_check_out_dtype, _check_supported, _keep_strides, _launch_reduce, _output,
                                        _shapes, _wrap_dim)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _emu(device: int) -> torch.device:
    return torch.device("emu", device)


def _launch(kernel: str, args: tuple, device: int) -> None:
    rt().launch(kernel, args, current_stream(device))


def _not_implemented(kernel: str, dtype) -> NotImplementedError:
    """CPU's own rejection of a dtype (its dispatch macro's message)."""
    return NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(dtype)}'")


def _floating_only(kernel: str, dtype) -> None:
    if dtype not in _FLOATING:
        if dtype in SUPPORTED:
            raise _not_implemented(kernel, dtype)
        raise unsupported_dtype(kernel, dtype, _FLOATING)


# --------------------------------------------------------------------------------- order stats
def _order_stat(op, x, dims, keepdim, k=0, values=None, indices=None, with_index=True):
    """Launches order_stat over ``dims``; allocates (or resizes) values/indices."""
    name = f"aten::{op}"
    _, shape = _shapes(x, dims, keepdim)
    if values is not None:
        _check_out_dtype(values, x.dtype)
        if indices is not None:
            _check_out_dtype(indices, torch.int64)
            if torch._C._is_alias_of(values, indices):
                check_overlap(name, values, indices)
    values = _output(name, x, shape, x.dtype, values)
    if with_index:
        indices = _output(name, x, shape, torch.int64, indices)
    if values.numel():
        keep_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
        v_ref = device_ref(values, keep_shape, _keep_strides(values, x.dim(), dims, keepdim))
        i_ref = device_ref(indices, keep_shape, _keep_strides(indices, x.dim(), dims, keepdim)) if with_index else None
        _launch("order_stat", (op, v_ref, i_ref, device_ref(x), sum(1 << d for d in dims), int(k)), x.get_device())
    return (values, indices) if with_index else values


def _dim_checked(fn: str, x, dim) -> tuple:
    """CPU's zero_numel_check_dims for the .dim forms: the reduced dims (empty for 0-dim x)."""
    d = _wrap_dim(dim, x.dim())
    if x.dim() and x.numel() == 0 and x.shape[d] == 0:
        raise IndexError(f"{fn}(): Expected reduction dim {d} to have non-zero size.")
    return (d,) if x.dim() else ()


def _median_all(op, x, out=None):
    common_device(f"aten::{op}", x)
    _check_supported(f"aten::{op}", x.dtype)
    if x.dtype == torch.bool:
        raise _not_implemented("median_cpu", x.dtype)
    return _order_stat(op, x, tuple(range(x.dim())), False, values=out, with_index=False)


def _median_dim(op, x, dim, keepdim, values=None, indices=None):
    common_device(f"aten::{op}.dim", x)
    _check_supported(f"aten::{op}.dim", x.dtype)
    if x.dtype == torch.bool:
        raise _not_implemented("median_out", x.dtype)
    dims = _dim_checked(op, x, dim)
    return _order_stat(op, x, dims, keepdim, values=values, indices=indices)


def _median_overloads(op: str) -> dict:
    """{overload: kernel} for ``op`` (median or nanmedian) over all elements and over one dim, with
    the latter's out= form."""
    def all_elements(x):
        return _median_all(op, x)

    def one_dim(x, dim, keepdim=False):
        return _median_dim(op, x, dim, keepdim)

    def one_dim_out(x, dim, keepdim=False, *, values, indices):
        return _median_dim(op, x, dim, keepdim, values, indices)
    return {op: all_elements, f"{op}.dim": one_dim, f"{op}.dim_values": one_dim_out}


for _op in ("median", "nanmedian"):
    OVERLOADS.update(_median_overloads(_op))


@OVERLOADS.implements("mode", "mode.values")
def _mode(x, dim=-1, keepdim=False, values=None, indices=None):
    common_device("aten::mode", x)
    _check_supported("aten::mode", x.dtype)
    dims = _dim_checked("mode", x, dim)
    return _order_stat("mode", x, dims, keepdim, values=values, indices=indices)


@OVERLOADS.implements("kthvalue", "kthvalue.values")
def _kthvalue(x, k, dim=-1, keepdim=False, values=None, indices=None):
    common_device("aten::kthvalue", x)
    _check_supported("aten::kthvalue", x.dtype)
    if x.dtype == torch.bool:
        raise _not_implemented("kthvalue_cpu", x.dtype)
    d = _wrap_dim(dim, x.dim())
    size = x.shape[d] if x.dim() else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return _order_stat("kthvalue", x, (d,) if x.dim() else (), keepdim, k, values, indices)


# ----------------------------------------------------------------------------------- cum ops
def _line_refs(x, *tensors):
    """(shape, refs, dim) for a scan: a 0-dim tensor is one line of length 1."""
    if x.dim() == 0:
        return (1,), [device_ref(t, (1,), (0,)) for t in tensors]
    return tuple(x.shape), [device_ref(t) for t in tensors]


def _cum_helper(op, x, values, indices, dim):
    name = f"aten::_{op}_helper"
    common_device(name, x, values, indices)
    _check_supported(name, x.dtype)
    d = _wrap_dim(dim, x.dim())
    if tuple(values.shape) != tuple(x.shape) or tuple(indices.shape) != tuple(x.shape) \
            or values.dtype != x.dtype or indices.dtype != torch.int64:
        raise RuntimeError(f"_{op}_helper: values ({values.dtype}{list(values.shape)}) and indices "
                           f"({indices.dtype}{list(indices.shape)}) must have the input's shape "
                           f"{list(x.shape)}, its dtype and int64")
    check_overlap(name, values, x)
    check_overlap(name, indices, x)
    if x.numel():
        _, (v, i, s) = _line_refs(x, values, indices, x)
        _launch("cum_select", (op, v, i, s, d), x.get_device())


@OVERLOADS.implements("_cummax_helper")
def cummax_helper(x, values, indices, dim):
    _cum_helper("cummax", x, values, indices, dim)


@OVERLOADS.implements("_cummin_helper")
def cummin_helper(x, values, indices, dim):
    _cum_helper("cummin", x, values, indices, dim)


@OVERLOADS.implements("_logcumsumexp", "_logcumsumexp.out")
def _logcumsumexp(x, dim, out=None):
    name = "aten::_logcumsumexp"
    common_device(name, x)
    _floating_only("logcumsumexp_out_cpu", x.dtype)
    d = _wrap_dim(dim, x.dim())
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=_emu(x.get_device()))
    else:
        common_device(name, out, x)
        _check_out_dtype(out, x.dtype)
        resize_out(out, x.shape)
        check_overlap(name, out, x)
    if x.numel():
        _, (o, s) = _line_refs(x, out, x)
        _launch("cum_select", ("logcumsumexp", o, None, s, d), x.get_device())
    return out


# ------------------------------------------------------------------------------------ aminmax
def _aminmax(x, dim, keepdim, mn=None, mx=None):
    name = "aten::aminmax"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                               "no identity.")
        dims = tuple(range(x.dim()))
    else:
        d = _wrap_dim(dim, x.dim())
        if x.dim() and x.shape[d] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
        dims = (d,) if x.dim() else ()
    _, shape = _shapes(x, dims, keepdim)
    if mn is not None:
        _check_out_dtype(mn, x.dtype)
        _check_out_dtype(mx, x.dtype)
        check_overlap(name, mn, mx)
    mn = _output(name, x, shape, x.dtype, mn)
    mx = _output(name, x, shape, x.dtype, mx)
    _launch_reduce("min", x, dims, keepdim, mn, x.dtype)
    _launch_reduce("max", x, dims, keepdim, mx, x.dtype)
    return mn, mx


@OVERLOADS.implements("aminmax")
def aminmax(x, *, dim=None, keepdim=False):
    return _aminmax(x, dim, keepdim)


@OVERLOADS.implements("aminmax.out")
def aminmax_out(x, *, dim=None, keepdim=False, min, max):
    return _aminmax(x, dim, keepdim, min, max)
