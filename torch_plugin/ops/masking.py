"""Masks and conditions on emu (emulator/kernels/masking.pyx): where.self, masked_fill_,
nonzero, nonzero_static, masked_select, masked_scatter_. The functional forms of masked_fill and
masked_scatter are ATen composites of these.

Data-dependent output sizes (nonzero, masked_select) cost one synchronisation each: a kernel
counts, the host reads the count (``item()``), a second kernel writes the output of that size.
nonzero_static needs none (its size is given).

Left out: nothing of these ops' CPU semantics that the tests know of; the cost is the kernel
library's (emulator/kernels/library.py).
"""
from __future__ import annotations

import warnings

import torch

from torch_plugin._dtypes import SUPPORTED, TO_CODE, scalar_type_name
from torch_plugin.errors import AROUND_SHAPE, refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import (broadcast_shape, broadcast_strides, check_overlap, common_device, device_ref,
                                      empty_like_layout, prepare_out, resize_out)
from torch_plugin.ops._indexing_common import (_check_out_dtype, _emu, _launch, _on_device,
                                               _scalar_value, _supported)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# ---------------------------------------------------------------------------------------------
# where, masked_fill_

def _select_operand(t, shape, device):
    """A where() value operand: a device tensor broadcast to ``shape``, or an immediate number."""
    if isinstance(t, torch.Tensor):
        if t.device.type == "emu":
            return device_ref(t, shape, broadcast_strides(t, shape))
        return t.item()
    return t


@OVERLOADS.implements("where.self", "where.self_out")
def _where(cond, a, b, out=None):
    name = "aten::where"
    device = common_device(name, cond, a, b, *([out] if out is not None else []))
    _supported(name, a, b)
    if cond.dtype != torch.bool:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{scalar_type_name(cond.dtype)}")
    dtype = torch.result_type(a, b)
    if dtype not in SUPPORTED:
        raise unsupported_dtype(name, dtype, SUPPORTED)
    shape = broadcast_shape(tuple(cond.shape), tuple(a.shape), tuple(b.shape))
    if out is None:
        out = empty_like_layout(shape, dtype, device, a, b, cond)
    else:
        _supported(name, out)
        prepare_out(name, out, shape, dtype)
        check_overlap(name, out, cond, a, b)
    if out.numel() == 0:
        return out
    cond = _on_device(cond, device)
    _launch("where", (device_ref(out), device_ref(cond, shape, broadcast_strides(cond, shape)),
                      _select_operand(a, shape, device), _select_operand(b, shape, device), TO_CODE[dtype]), device)
    return out


def _masked_fill_(self, mask, value):
    name = "masked_fill_"
    device = common_device(f"aten::{name}", self, mask, *([value] if isinstance(value, torch.Tensor) else []))
    _supported(f"aten::{name}", self)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{str(mask.dtype).replace('torch.', '')}")
    value = _scalar_value(name, value, self.dtype, device)
    shape = tuple(self.shape)
    if broadcast_shape(shape, tuple(mask.shape)) != shape:
        raise RuntimeError(f"The expanded size of the tensor ({shape[-1] if shape else 1}) must match the existing "
                           f"size ({mask.shape[-1]}) at non-singleton dimension {len(shape) - 1}.  Target sizes: "
                           f"{list(shape)}.  Tensor sizes: {list(mask.shape)}")
    if torch._debug_has_internal_overlap(self) == 1:
        warnings.warn("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
                      "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar",
                      UserWarning, stacklevel=4)
    check_overlap(f"aten::{name}", self, mask)
    if self.numel() == 0:
        return self
    if isinstance(value, torch.Tensor):
        value = device_ref(value, shape, (0,) * len(shape))
    mref = device_ref(mask, shape, broadcast_strides(mask, shape))
    _launch("where", (device_ref(self), mref, value, device_ref(self), TO_CODE[self.dtype]), device)
    return self


@OVERLOADS.implements("masked_fill_.Scalar")
def masked_fill_scalar_(self, mask, value):
    return _masked_fill_(self, mask, value)


@OVERLOADS.implements("masked_fill_.Tensor")
def masked_fill_tensor_(self, mask, value):
    return _masked_fill_(self, mask, value)


# ---------------------------------------------------------------------------------------------
# nonzero, masked_select, masked_scatter_

def _count(t: torch.Tensor, shape=None, strides=None) -> int:
    """Number of nonzero elements: a counting kernel, then one synchronising read of the count."""
    device = t.get_device()
    count = torch.empty((), dtype=torch.int64, device=_emu(device))
    _launch("count_nonzero", (device_ref(count, (1,), (1,)), device_ref(t, shape, strides)), device)
    return int(count.item())


def _nonzero(x, out=None):
    name = "aten::nonzero"
    device = common_device(name, x, *([out] if out is not None else []))
    _supported(name, x)
    if out is not None and out.dtype != torch.int64:
        raise RuntimeError(f"nonzero: Expected out tensor to have scalar type Long but got scalar type "
                           f"{scalar_type_name(out.dtype)}")
    if x.numel():
        refuse_in_projection(name, "its output size is the number of nonzero elements (data)", AROUND_SHAPE)
    n = _count(x) if x.numel() else 0
    shape = (n, x.dim())
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=_emu(device))
    else:
        check_overlap(name, out, x)
        if tuple(out.shape) != shape:
            out.resize_(shape)  # ATen's nonzero_out resizes without a warning
    if x.numel():
        _launch("nonzero", (device_ref(out), device_ref(x), n), device)
    return out


@OVERLOADS.implements("nonzero")
def nonzero(self):
    return _nonzero(self)


@OVERLOADS.implements("nonzero.out")
def nonzero_out(self, *, out):
    return _nonzero(self, out)


def _masked_select(x, mask, out=None):
    name = "aten::masked_select"
    device = common_device(name, x, mask, *([out] if out is not None else []))
    _supported(name, x)
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    if out is not None:
        _check_out_dtype(name, out, x.dtype)
    shape = broadcast_shape(tuple(x.shape), tuple(mask.shape))
    mstrides = broadcast_strides(mask, shape)
    if 0 not in shape:
        refuse_in_projection(name, "its output size is the number of true mask elements (data)", AROUND_SHAPE)
    n = _count(mask, shape, mstrides) if 0 not in shape else 0
    if out is None:
        out = torch.empty((n,), dtype=x.dtype, device=_emu(device))
    else:
        check_overlap(name, out, x, mask)
        resize_out(out, (n,))
    if n:
        _launch("masked_select", (device_ref(out), device_ref(x, shape, broadcast_strides(x, shape)),
                                  device_ref(mask, shape, mstrides), n), device)
    return out


@OVERLOADS.implements("masked_select")
def masked_select(self, mask):
    return _masked_select(self, mask)


@OVERLOADS.implements("masked_select.out")
def masked_select_out(self, mask, *, out):
    return _masked_select(self, mask, out)


@OVERLOADS.implements("masked_scatter_")
def masked_scatter_(self, mask, source):
    name = "aten::masked_scatter_"
    device = common_device(name, self, mask, source)
    _supported(name, self, source)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{str(mask.dtype).replace('torch.', '')}")
    if self.dtype != source.dtype:
        raise RuntimeError(f"masked_scatter_: expected self and source to have same dtypes but got "
                           f"{scalar_type_name(self.dtype)} and {scalar_type_name(source.dtype)}")
    shape = tuple(self.shape)
    if broadcast_shape(shape, tuple(mask.shape)) != shape:
        raise RuntimeError(f"masked_scatter_: mask of shape {list(mask.shape)} cannot be broadcast to self "
                           f"of shape {list(shape)}")
    check_overlap(name, self, mask, source)
    if self.numel() == 0:
        return self
    flat = source if source.is_contiguous() else source.contiguous()
    src_ref = device_ref(flat, (flat.numel(),), (1,))
    _launch("masked_scatter", (device_ref(self), device_ref(mask, shape, broadcast_strides(mask, shape)), src_ref),
            device)
    return self


# ---------------------------------------------------------------------------------------------
# nonzero_static


@OVERLOADS.implements("nonzero_static", "nonzero_static.out")
def _nonzero_static(self, size, fill_value=-1, out=None):
    name = "aten::nonzero_static"
    device = common_device(name, self, *([out] if out is not None else []))
    _supported(name, self)
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    shape = (size, self.dim())
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=_emu(device))
    else:
        if out.dtype != torch.int64:
            raise RuntimeError(f"nonzero_static: Expected out tensor to have scalar type Long but got scalar type "
                               f"{scalar_type_name(out.dtype)}")
        check_overlap(name, out, self)
        if tuple(out.shape) != shape:
            out.resize_(shape)
    if out.numel():
        _launch("nonzero_static", (device_ref(out), device_ref(self), int(size), int(fill_value)), device)
    return out
