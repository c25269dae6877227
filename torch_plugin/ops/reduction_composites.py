"""Reductions on emu that are composites of other device ops: nansum (+ .out: NaNs masked to 0,
then the device sum), count_nonzero.dim_IntList (``x != 0`` then sum), equal (eq, all, then one
host read: the bool it returns).

Left out: kernels of their own (each runs as the device ops it is made of).
"""
from __future__ import annotations

import torch

from torch_plugin.errors import refuse_in_projection
from torch_plugin.ops import registry
from torch_plugin.ops._common import common_device
from torch_plugin.ops.reduction import _check_supported, _int_dims, _reduced_dims
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

def _nansum(x, dim, keepdim, dtype, out=None):
    common_device("aten::nansum", x)
    _check_supported("aten::nansum", x.dtype)
    source = x.masked_fill(x.isnan(), 0) if x.dtype.is_floating_point else x
    if out is None:
        return torch.sum(source, _int_dims(dim) or [], keepdim, dtype=dtype)
    return torch.sum(source, _int_dims(dim) or [], keepdim, dtype=dtype, out=out)


@OVERLOADS.implements("nansum")
@registry.composite
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    return _nansum(x, dim, keepdim, dtype)


@OVERLOADS.implements("nansum.out")
@registry.composite
def nansum_out(x, dim=None, keepdim=False, *, dtype=None, out):
    return _nansum(x, dim, keepdim, dtype, out)


@OVERLOADS.implements("count_nonzero.dim_IntList")
@registry.composite
def count_nonzero_dim_intlist(x, dim):
    common_device("aten::count_nonzero", x)
    _check_supported("aten::count_nonzero", x.dtype)
    _reduced_dims("aten::count_nonzero", x.dim(), list(dim))
    return torch.ne(x, 0).sum(list(dim), dtype=torch.int64)


@OVERLOADS.implements("equal")
@registry.composite
def equal(x, other):
    """CPU's torch.equal: False for different shapes; else elementwise == in the common dtype, all
    true (NaN is never equal). One host synchronisation (the bool is read back)."""
    if x.device != other.device:
        raise RuntimeError(f"Cannot compare two tensors on different devices. Got: {x.device} and {other.device}")
    common_device("aten::equal", x, other)
    if tuple(x.shape) != tuple(other.shape):
        return False
    if x.numel() == 0:
        return True
    refuse_in_projection("aten::equal", "returns a Python bool computed from device values")
    return bool(torch.eq(x, other).all().item())
